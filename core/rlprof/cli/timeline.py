"""``rlprof timeline RUN [-o FILE [--force]] [--with-traces] [--steps 1,2] [--run ID]``: the command's options.

What the timeline holds is :mod:`rlprof.analysis.timeline`; this module parses the arguments, picks the
run, and writes the file where the user asked (:mod:`rlprof.cli.output_file`).

Exit status: 0 written; 1 nothing to draw (no timings in the manifest) or the file cannot be written;
2 usage (no manifests, unknown run, ``-o`` names a file that exists and ``--force`` was not given).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

from rlprof.analysis.anatomy import timing_record
from rlprof.analysis.runs import locate, without_copies
from rlprof.analysis.timeline import DEFAULT_OUTPUT, build_timeline, write_timeline
from rlprof.cli.output_file import OutputRefused, add_arguments as add_output_arguments, choose as choose_output
from rlprof.errors import EXIT_FAILED, EXIT_INVALID as EXIT_USAGE, EXIT_OK
from rlprof.manifest import read_records


def parse_steps(text: str) -> list[int]:
    """``1,3,5-7`` -> ``[1, 3, 5, 6, 7]``. :raises ValueError: anything else."""
    steps: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, dash, last = part.partition("-")
        steps += list(range(int(first), int(last) + 1)) if dash else [int(first)]
    if not steps:
        raise ValueError(text)
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof timeline", description="One Chrome/Perfetto trace of a whole run: a process per rank, a track per role, every profiled step's regions.")
    parser.add_argument("paths", nargs="+", metavar="RUN", help="save paths (one per node), run directories or manifest files")
    add_output_arguments(parser, default=DEFAULT_OUTPUT, what="the trace to write (.json)")
    parser.add_argument("--run", default=None, help="the run id (or unique prefix); default: the newest run found")
    parser.add_argument("--steps", default=None, metavar="1,2,5-7", help="only these profiled steps (default: all)")
    parser.add_argument("--with-traces", action="store_true", help="also merge the backends' Chrome traces of those steps, aligned on the manifest's clock")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        steps = parse_steps(opts.steps) if opts.steps is not None else None
    except ValueError:
        print(f"rlprof timeline: --steps: got {opts.steps!r}; allowed: comma-separated step numbers or ranges, e.g. 1,3,5-7", file=sys.stderr)
        return EXIT_USAGE
    absent = [p for p in opts.paths if not Path(p).exists()]
    if absent:
        print(f"rlprof timeline: not found: {', '.join(absent)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        output = choose_output(opts.output, default=DEFAULT_OUTPUT, force=opts.force)
    except OutputRefused as refused:
        print(f"rlprof timeline: {refused}", file=sys.stderr)
        return EXIT_USAGE
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in without_copies(read_records(opts.paths)):
        by_run.setdefault(str(record.get("run")), []).append(record)
    if not by_run:
        print(f"rlprof timeline: no rlprof manifests under {', '.join(opts.paths)}", file=sys.stderr)
        return EXIT_USAGE
    if opts.run is not None:
        chosen = [r for r in by_run if r == opts.run] or [r for r in by_run if r.startswith(opts.run)]
        if len(chosen) != 1:
            print(f"rlprof timeline: --run {opts.run!r} matches {len(chosen) or 'no'} runs; runs found: {', '.join(sorted(by_run, reverse=True))}", file=sys.stderr)
            return EXIT_USAGE
        run_id = chosen[0]
    else:
        run_id = max(by_run)
        if len(by_run) > 1:
            print(f"rlprof timeline: {len(by_run)} runs found; drawing the newest, {run_id} (--run ID for another)", file=sys.stderr)
    records = by_run[run_id]
    locate(records)  # traces on other nodes, or gathered to the controller
    warnings: list[str] = []
    try:
        events = build_timeline(records, steps=steps, with_traces=opts.with_traces, warn=warnings.append)
        first = next(events)
    except ValueError as exc:
        print(f"rlprof timeline: run {run_id}: nothing to draw: {exc}", file=sys.stderr)
        return EXIT_FAILED
    origin = min(r["start_ns"] for r in records if timing_record(r) and (steps is None or r["step"] in steps))
    other = {"run": run_id, "origin_ns": origin, "steps": steps, "with_traces": opts.with_traces}
    try:
        with output.writing() as handle:
            count = write_timeline(_chain(first, events), handle, other)
    except OutputRefused as refused:  # the name was taken while the timeline was built
        print(f"rlprof timeline: {refused}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"rlprof timeline: cannot write {output.path}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for line in warnings:
        print(f"rlprof timeline: warning: {line}", file=sys.stderr)
    print(f"rlprof timeline: wrote {output.said()} ({count} events, run {run_id}); open it in https://ui.perfetto.dev or chrome://tracing")
    return EXIT_OK


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest
