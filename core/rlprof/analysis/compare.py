"""``rlprof compare RUN_A RUN_B [--ranks] [--json] [--fail-above PCT]``: what changed between two runs.

Use it after a change to the trainer (or in CI, against a baseline run) to see which regions got
slower or faster. Each side is a save path, run directory or manifest (the newest run found there,
or ``--run-a``/``--run-b`` ID). Both are read from the manifests only (:mod:`rlprof.analysis.anatomy`): a
region's time is its median across processes of each process's median over the profiled steps; the
step's time is the median over profiled steps of the step time (its window, first start to last
end). One row per region (per region and process with ``--ranks``: trainer ranks, and rollout
replicas named ``replica N``) with A, B, the change and the % change, sorted by impact (the
absolute change in ms); regions found in only one run are listed too. Where both runs' traces are
on this disk, each changed region also says which of its parts moved most (compute, exposed
communication, memory, idle: :mod:`rlprof.analysis.inside`; ``--no-traces`` reads none).

``--fail-above PCT`` exits 1 when the step or a region got more than PCT percent slower (regions
shorter than ``--min-ms`` in both runs are not held to it: their noise is larger than their cost).
Exit status: 0 compared (no regression above the limit), 1 regression, 2 usage / no manifests / no timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from rlprof.analysis.anatomy import Anatomy, RankTime, process_name, process_order
from rlprof.analysis.inside import add_inside, moved
from rlprof.analysis.runs import RunReport, build_reports

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2
STEP_ROW = "(step)"
"""The row holding the whole step's time."""
MIN_MS = 1.0


Process = tuple[int | None, int | None]
"""A process of a run: ``(rank, None)`` for a trainer rank, ``(None, replica_rank)`` for a rollout replica;
:data:`ACROSS` for a row across processes."""
ACROSS: Process = (None, None)


@dataclass
class Change:
    region: str
    rank: int | None
    """None: across processes (the median), or a replica's row; a trainer rank with ``--ranks``."""
    a_ms: float | None
    b_ms: float | None
    replica_rank: int | None = None
    """A rollout replica's row with ``--ranks``."""
    moved: str | None = None
    """Which part of the region moved most (``exposed comm +3.20 ms``), from both runs' traces
    (:func:`rlprof.analysis.inside.moved`); None when they are not on this disk, or for the step."""

    @property
    def name(self) -> str | None:
        """``rank 3``, ``replica 0``, or None for a row across processes."""
        return None if self.rank is None and self.replica_rank is None else process_name(self.rank, self.replica_rank)

    @property
    def change_ms(self) -> float:
        return (self.b_ms or 0.0) - (self.a_ms or 0.0)

    @property
    def change_pct(self) -> float | None:
        if self.a_ms is None or self.b_ms is None or self.a_ms <= 0:
            return None
        return 100.0 * (self.b_ms - self.a_ms) / self.a_ms

    @property
    def note(self) -> str:
        if self.a_ms is None or self.b_ms is None:
            return "only in A" if self.b_ms is None else "only in B"
        return f"moved most: {self.moved}" if self.moved else ""

    def as_dict(self) -> dict[str, Any]:
        pct = self.change_pct
        return {**asdict(self), "name": self.name, "change_ms": round(self.change_ms, 3),
                "change_pct": None if pct is None else round(pct, 2), "note": self.note}


def region_times(anatomy: Anatomy, per_rank: bool) -> dict[tuple[str, Process], float]:
    """``(region, process or ACROSS) -> ms`` for one run, with the step itself as :data:`STEP_ROW`
    (per process: its ``step`` records' median; across processes: the median step time)."""
    times: dict[tuple[str, Process], float] = {}
    for summary in anatomy.regions:
        if per_rank:
            times.update({(summary.region, _process(t)): t.ms for t in summary.spread.per_rank})
        else:
            times[summary.region, ACROSS] = summary.spread.median_ms
    if per_rank:
        by_process: dict[Process, list[float]] = {}
        for step in anatomy.steps:
            for t in (step.spread.per_rank if step.spread else []):
                by_process.setdefault(_process(t), []).append(t.ms)
        times.update({(STEP_ROW, key): statistics.median(ms) for key, ms in by_process.items()})
    else:
        spans = [step.span_ms for step in anatomy.steps if step.span_ms is not None]
        if spans:
            times[STEP_ROW, ACROSS] = statistics.median(spans)
    return times


def compare(a: RunReport, b: RunReport, per_rank: bool = False) -> list[Change]:
    """Every region (and process) of either run, the largest absolute change first."""
    ta, tb = region_times(a.anatomy, per_rank), region_times(b.anatomy, per_rank)
    changes = [Change(region, who[0], ta.get((region, who)), tb.get((region, who)), who[1]) for region, who in set(ta) | set(tb)]
    return sorted(changes, key=lambda c: (-abs(c.change_ms), c.region, -1 if c.name is None else process_order(c.rank, c.replica_rank)))


def _process(t: RankTime) -> Process:
    return (t.rank, None) if t.replica_rank is None else (None, t.replica_rank)


def regressions(changes: Sequence[Change], pct: float, min_ms: float = MIN_MS) -> list[Change]:
    """Rows that got more than ``pct`` percent slower (and are at least ``min_ms`` long in one run)."""
    return [c for c in changes if c.change_pct is not None and c.change_pct > pct and max(c.a_ms, c.b_ms) >= min_ms]


def render(a: RunReport, b: RunReport, changes: Sequence[Change], per_rank: bool) -> str:
    lines = [f"A: run {a.run_id} ({len(a.anatomy.steps)} profiled steps, {len(a.processes)} processes)",
             f"B: run {b.run_id} ({len(b.anatomy.steps)} profiled steps, {len(b.processes)} processes)",
             "times: per process the median over profiled steps, then the median across processes; (step): the median step time"
             if not per_rank else "times: each process's median over profiled steps", ""]
    rows = [("region", "process", "A ms", "B ms", "change ms", "change", "")] if per_rank else [("region", "A ms", "B ms", "change ms", "change", "")]
    for c in changes:
        cells = [c.region] + ([c.name or "-"] if per_rank else []) + [
            "-" if c.a_ms is None else f"{c.a_ms:.2f}", "-" if c.b_ms is None else f"{c.b_ms:.2f}",
            f"{c.change_ms:+.2f}", "-" if c.change_pct is None else f"{c.change_pct:+.1f}%", c.note]
        rows.append(tuple(cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        first = row[0].ljust(widths[0])
        rest = [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
        lines.append(("  ".join([first] + rest) + ("  " + row[-1] if row[-1] else "")).rstrip())
    return "\n".join(lines)


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
                        help="do not read the runs' traces to say which part of a region moved (compute, exposed comm, memory, idle)")
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
    slower = regressions(changes, opts.fail_above, opts.min_ms) if opts.fail_above is not None else []
    if opts.json:
        print(json.dumps({"a": a.run_id, "b": b.run_id, "per_rank": opts.ranks, "changes": [c.as_dict() for c in changes],
                          "fail_above": opts.fail_above, "regressions": [c.as_dict() for c in slower]}, indent=1))
    else:
        print(render(a, b, changes, opts.ranks))
    for c in slower:
        where = f" on {c.name}" if c.name is not None else ""
        print(f"rlprof compare: regression: {c.region}{where} {c.a_ms:.2f} -> {c.b_ms:.2f} ms ({c.change_pct:+.1f}% > {opts.fail_above:g}%)",
              file=sys.stderr)
    return EXIT_REGRESSION if slower else EXIT_OK
