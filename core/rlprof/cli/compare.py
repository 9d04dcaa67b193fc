"""``rlprof compare RUN_A RUN_B [--ranks] [--json] [--fail-above PCT]``: the command's options.

What is compared, and when a change is clear of the noise, is :mod:`rlprof.analysis.compare`; this module
parses the arguments, finds each side's run and says which regression fails ``--fail-above``.

Exit status: 0 compared (no regression above the limit), 1 regression, 2 usage / no manifests / no timings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from rlprof.analysis.compare import MIN_MS, STEP_ROW, TOO_FEW, Change, above, compare, left_out, regressions, render
from rlprof.analysis.inside import add_inside, moved
from rlprof.analysis.runs import RunReport, build_reports
from rlprof.errors import EXIT_FAILED as EXIT_REGRESSION, EXIT_INVALID as EXIT_USAGE, EXIT_OK


def _load(path: str, run: str | None, side: str) -> RunReport:
    """The run a side names. :raises LookupError: with a message for the user."""
    if not Path(path).exists():
        raise LookupError(f"{side}: not found: {path}")
    reports = build_reports([path], run=run)
    if not reports:
        raise LookupError(f"{side}: no rlprof manifests under {path}")
    if len(reports) > 1:
        print(f"rlprof compare: {side}: {len(reports)} runs under {path}; using the newest, {reports[0].run_id} "
              f"(--run-{side.lower()} ID for another)", file=sys.stderr)
    report = reports[0]
    if not report.anatomy.has_timings:
        raise LookupError(f"{side}: run {report.run_id} has no step or region timings in its manifest (no profiled step completed)")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof compare", description="Per region (and process): run A, run B, the change and % change, largest first.")
    parser.add_argument("a", metavar="RUN_A", help="the baseline: a save path, run directory or manifest")
    parser.add_argument("b", metavar="RUN_B", help="the run to compare with it")
    parser.add_argument("--run-a", default=None, metavar="ID", help="the run id (or prefix) under RUN_A; default: the newest")
    parser.add_argument("--run-b", default=None, metavar="ID", help="the run id (or prefix) under RUN_B; default: the newest")
    parser.add_argument("--ranks", action="store_true", help="one row per region and process (trainer rank or rollout replica)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--no-traces", action="store_true",
                        help="do not read the runs' traces to say which part of a region moved (compute, exposed comm, exposed memory, idle)")
    parser.add_argument("--fail-above", type=float, default=None, metavar="PCT", help="exit 1 when the step or a region got more than PCT%% slower")
    parser.add_argument("--min-ms", type=float, default=MIN_MS, help=f"--fail-above ignores rows shorter than this in both runs (default {MIN_MS:g})")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        a = _load(opts.a, opts.run_a, "A")
        b = _load(opts.b, opts.run_b, "B")
    except LookupError as exc:
        print(f"rlprof compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    changes = compare(a, b, per_rank=opts.ranks)
    if not opts.no_traces:
        add_inside([a, b], warn=lambda line: print(line.replace("rlprof report", "rlprof compare"), file=sys.stderr))
        for c in changes:
            if c.region != STEP_ROW and c.a_ms is not None and c.b_ms is not None:
                c.moved = moved(a, b, c.region, c.name)
    limit = opts.fail_above
    slower = regressions(changes, limit, opts.min_ms) if limit is not None else []
    untold = [c for c in above(changes, limit, opts.min_ms) if c.told == TOO_FEW] if limit is not None else []
    if opts.json:
        print(json.dumps({"a": a.run_id, "b": b.run_id, "per_rank": opts.ranks,
                          "left_out": {"a": left_out(a.anatomy), "b": left_out(b.anatomy)},
                          "changes": [c.as_dict() for c in changes], "fail_above": limit,
                          "regressions": [c.as_dict() for c in slower], "too_few_samples": [c.as_dict() for c in untold]}, indent=1))
    else:
        print(render(a, b, changes, opts.ranks))
    for c in slower:
        print(f"rlprof compare: regression: {_row(c)} {c.a_ms:.2f} -> {c.b_ms:.2f} ms ({c.change_pct:+.1f}% > {limit:g}%, "
              f"clear of the noise)", file=sys.stderr)
    for c in untold:
        print(f"rlprof compare: not held to --fail-above, too few samples to tell: {_row(c)} {c.a_ms:.2f} -> {c.b_ms:.2f} ms "
              f"({c.change_pct:+.1f}%; {len(c.a.values)} and {len(c.b.values)} samples; profile more steps)", file=sys.stderr)
    return EXIT_REGRESSION if slower else EXIT_OK


def _row(c: Change) -> str:
    return c.region + (f" on {c.name}" if c.name is not None else "")
