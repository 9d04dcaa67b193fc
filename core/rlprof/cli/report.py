"""``rlprof report RUN [RUN ...] [--run ID] [--json] [--html [-o FILE] [--force]]``: the command's options.

What the report says, and how it is built, is :mod:`rlprof.analysis.report` (the text), ``.verdict``
(``--json``) and ``.html`` (``--html``); this module parses the arguments, reads the runs and writes where
the user asked (:mod:`rlprof.cli.output_file`).

Exit status: 0 every run is ok, 1 a run captured nothing or misses something, 2 no manifests / usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rlprof.analysis.anatomy import STRAGGLER_PCT
from rlprof.analysis.details import DETAILS_HOOK, add_details
from rlprof.analysis.compute import add_compute
from rlprof.analysis.inside import add_inside
from rlprof.analysis.rollout_requests import add_request_curves
from rlprof.analysis.report import HTML_DEFAULT, render
from rlprof.analysis.runs import build_reports
from rlprof.analysis.verdict import report_dict
from rlprof.cli import not_found
from rlprof.cli.output_file import OutputRefused, add_arguments as add_output_arguments, choose as choose_output, run_home, write_to
from rlprof.errors import EXIT_FAILED as EXIT_PROBLEMS, EXIT_INVALID as EXIT_USAGE, EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof report", description="Where each profiled step's time went, per region and rank, and what the run captured or missed.")
    parser.add_argument("paths", nargs="+", metavar="RUN", help="save paths (one per node), run directories or manifest files")
    parser.add_argument("--run", default=None, help="only the run with this id (or unique prefix); default: every run found, newest first")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--html", action="store_true", help="write a self-contained HTML page (to -o FILE, else report.html in the run's directory)")
    add_output_arguments(parser, default=HTML_DEFAULT, what="where --html writes")
    parser.add_argument("--straggler-pct", type=float, default=STRAGGLER_PCT,
                        help=f"flag a rank more than this many percent over the other ranks' median in a region, beyond the "
                             f"run's own noise (default {STRAGGLER_PCT:g}; docs/analysis.md, \"Noise\")")
    parser.add_argument("--no-details", action="store_true", help=f"do not ask backends for per-file details (their {DETAILS_HOOK} hook)")
    parser.add_argument("--no-traces", action="store_true",
                        help="do not read the run's traces for the split inside each region (compute / exposed comm / memory / idle)")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if opts.output is not None and not opts.html:
        parser.error("-o FILE is where --html writes: add --html")
    if opts.html and opts.output is not None:  # a file named that cannot be written: said before reading anything
        try:
            choose_output(opts.output, default=HTML_DEFAULT, force=opts.force)
        except OutputRefused as refused:
            print(f"rlprof report: {refused}", file=sys.stderr)
            return EXIT_USAGE
    if not_found("report", opts.paths):
        return EXIT_USAGE
    try:
        reports = build_reports(opts.paths, run=opts.run, straggler_pct=opts.straggler_pct)
    except LookupError as exc:
        print(f"rlprof report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not reports:
        print(f"rlprof report: no rlprof manifests under {', '.join(opts.paths)}: nothing was profiled there", file=sys.stderr)
        return EXIT_USAGE
    if not opts.no_details:
        add_details(reports, warn=lambda line: print(line, file=sys.stderr))
    if not opts.no_traces:
        add_inside(reports, warn=lambda line: print(line, file=sys.stderr))
    add_request_curves(reports)  # the rollout's requests of the steps listed and drawn: their curves and slowest ids
    add_compute(reports)
    if opts.html:
        from rlprof.analysis.html import render_page

        try:
            # no -o: beside the runs it shows (their directory), never wherever the user stands
            target = choose_output(opts.output, default=run_home([d for r in reports for d in r.run_dirs]) / HTML_DEFAULT,
                                   force=opts.force)
        except OutputRefused as refused:
            print(f"rlprof report: {refused}", file=sys.stderr)
            return EXIT_USAGE
        failed, _ = write_to(target, "report", lambda handle: handle.write(render_page(reports)))
        if failed is not None:
            return failed
        print(f"rlprof report: wrote {target.said()} ({len(reports)} run{'s' if len(reports) != 1 else ''})", file=sys.stderr)
    if opts.json:
        print(json.dumps({"runs": [report_dict(r) for r in reports]}, indent=1))
    elif not opts.html:
        print("\n\n".join(render(r) for r in reports))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_PROBLEMS
