"""``rlprof breakdown PATH... [--json] [--steps] [--regions] [--address ADDR]``: the command's options and its table.

Which files are read, how, and where their rows are kept is :mod:`rlprof.analysis.breakdown_files`; with
``--address`` each file is read on the Ray node that holds it (:mod:`rlprof.cli.breakdown_cluster`).

Exit status: 0 rows (or nothing asked that could fail); 1 no rows and a file failed or was passed over.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rlprof.analysis.breakdown import TRACE_REGION, row_fields
from rlprof.row_model import BREAKDOWN, LABELS, Row, cell
from rlprof.row_model import columns as breakdown_columns
from rlprof.analysis.trace_readers import NO_READER, readers, readers_line
from rlprof.analysis.breakdown_files import WORKERS, breakdown
from rlprof.analysis.trace_walk import collect
from rlprof.cli.breakdown_cluster import ClusterUnreachable, on_cluster
from rlprof.errors import EXIT_FAILED, EXIT_OK


def _chosen(rows: list[Row], steps: bool, regions: bool) -> list[Row]:
    """``--steps``: the ``ProfilerStep#N`` rows; ``--regions``: the other named regions; neither: all rows."""
    if not steps and not regions:
        return rows
    is_step = lambda row: row.region.startswith("ProfilerStep#")  # noqa: E731
    return [row for row in rows if (steps and is_step(row)) or (regions and not is_step(row) and row.region != TRACE_REGION)]


def _table(rows: list[Row]) -> str:
    """The text table: the columns :class:`~rlprof.row_model.Row` lists for ``rlprof breakdown``."""
    columns = breakdown_columns(BREAKDOWN)
    heads = [LABELS[c] for c in columns]
    widths = [max(12, len(h) + 2) for h in heads]
    lines = []
    for path in dict.fromkeys(row.path for row in rows):
        mine = [row for row in rows if row.path == path]
        lines.append(f"{path} (rank {mine[0].rank}, {mine[0].device})")
        width = max(len(row.region) for row in mine) + 2
        lines.append(f"  {'region':<{width}}{'step':>5}" + "".join(f"{h:>{w}}" for h, w in zip(heads, widths)))
        for row in mine:
            cells = "".join(f"{cell(row, c):>{w}}" for c, w in zip(columns, widths))
            lines.append(f"  {row.region:<{width}}{'' if row.step is None else row.step:>5}{cells}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rlprof breakdown",
        description="Inside each region of trace files: compute, exposed communication, copies and idle "
                    "(ms; definitions in docs/analysis.md, 'Inside a region').")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files, or directories holding them")
    parser.add_argument("--json", action="store_true", help='print {"rows": [...], "errors": [...], "skipped": [...]}')
    parser.add_argument("--steps", action="store_true", help="only the ProfilerStep#N rows")
    parser.add_argument("--regions", action="store_true", help="only the named regions (annotations, role regions)")
    parser.add_argument("--workers", type=int, default=WORKERS, help=f"processes reading files (default {WORKERS})")
    parser.add_argument("--address", metavar="ADDR",
                        help="a running Ray cluster (host:port, or auto): each file is read on the node that holds it, "
                             "only its rows come back")
    args = parser.parse_args(argv)
    answers, problems = readers()
    if args.address:
        try:
            rows, errors, skipped = on_cluster(args.address, args.paths)
        except ClusterUnreachable as exc:
            print(f"rlprof breakdown: {exc}", file=sys.stderr)
            return EXIT_FAILED
    else:
        for line in problems:
            print(f"rlprof breakdown: {line}", file=sys.stderr)
        collected = collect(args.paths, answers)
        skipped = collected.skipped
        rows, errors = breakdown(collected.files, workers=args.workers, answers=answers)
    rows = _chosen(rows, args.steps, args.regions)
    for path, reason in errors:
        print(f"rlprof breakdown: {path}: {reason}", file=sys.stderr)
    for path, reason in skipped:
        print(f"rlprof breakdown: {path}: skipped: {reason}", file=sys.stderr)
    if any(reason == NO_READER for _, reason in skipped):
        print(f"rlprof breakdown: the installed readers read {readers_line(answers)}", file=sys.stderr)
    if args.json:
        print(json.dumps({"rows": [row_fields(row) for row in rows],
                          "errors": [{"path": path, "reason": reason} for path, reason in errors],
                          "skipped": [{"path": path, "reason": reason} for path, reason in skipped]}, indent=1))
    elif rows:
        print(_table(rows))
    return EXIT_OK if rows or not (errors or skipped) else EXIT_FAILED
