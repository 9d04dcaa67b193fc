"""What changed between two runs, region by region, and whether it stands clear of the noise (``rlprof compare``,
:mod:`rlprof.cli.compare`).

Use it after a change to the trainer (or in CI, against a baseline run) to see which regions got
slower or faster. Each side is a save path, run directory or manifest (the newest run found there,
or ``--run-a``/``--run-b`` ID). Both are read from the manifests only (:mod:`rlprof.analysis.anatomy`).

Which steps: the first profiled step is left out when a side has more than one (it carries the
warm-up: allocator, caches, compilation; in the demo it takes about twice as long as the next), and the
output says so.

What is compared: a region's time is its median across processes of each process's median over the
compared steps; the step's time is the median over compared steps of the step time (its window, first
start to last end). One row per region (per region and process with ``--ranks``: trainer ranks, and
rollout replicas named ``replica N``) with A, B, the change and the % change, sorted by impact (the
absolute change in ms); regions found in only one run are listed too. Where both runs' traces are
on this disk, each changed region also says which of its parts moved most (compute, exposed
communication, exposed memory, idle: :mod:`rlprof.analysis.inside`; ``--no-traces`` reads none).

Rows from the rollout's requests (docs/analysis.md, "Rollout requests"), over every step of the step metrics but
the first: ``(requests) tail``, the tail of the replica each step waited for (each replica's with ``--ranks``), and
``(requests) slowest request``, the slowest request's latency, each step a sample, judged by the same rule.

Noise: each side's **samples** of a row are its times per compared step and process (``(step)``
across processes: one step time per step), and its **spread** is their min-max. A change is *clear*
when both hold:

* the Mann-Whitney U test over the two sides' samples gives a two-sided p-value of at most
  :data:`CHANCE` (1%): when nothing changed, both sides' samples are exchangeable and such a result
  happens by chance at most 1% of the time (half of that as "slower"): a CI gate on a dozen rows must
  not fail one run in two on noise. Its direction (slower, faster) is where most pairs of samples point;
* the change (B's time minus A's) **stands clear** of the noise (:mod:`rlprof.analysis.noise`, the rule
  every flag of the analysis follows): it passes the widest step-to-step range of any one process's time
  in either run (of the step times, for ``(step)``) by 5% of A's time and by the floor (1 ms, or 1% of A's
  step time). A machine whose load changes between two runs moves every sample of the second (two runs of
  the same demo on the shared 2-core VM: a region's median 3.5x apart), which the test alone calls clear;
  a run whose own steps vary that much shows it in its processes' ranges.

The most extreme ordering, every sample of one side beyond every sample of the other, has
probability ``2 / C(n+m, n)`` (n, m samples); where even that is above 1% (4 or fewer samples a side)
the row says *too few samples to tell*; otherwise a change that is not clear is *inside the noise*.

``--fail-above PCT`` exits 1 when the step or a region got more than PCT percent slower *and* the change
is clear (regions shorter than ``--min-ms`` in both runs are not held to it: their noise is larger than
their cost). Rows above PCT with too few samples are named on stderr, not failed: profile more steps.
Exit status: 0 compared (no regression above the limit), 1 regression, 2 usage / no manifests / no timings.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from rlprof.analysis.anatomy import Anatomy, RankTime, StepTime, process_name, process_order
from rlprof.analysis.compute import compare_lines
from rlprof.analysis.noise import MARGIN, spread, stands_clear
from rlprof.analysis.rollout_requests import request_samples
from rlprof.analysis.runs import RunReport

STEP_ROW = "(step)"
"""The row holding the whole step's time."""
MIN_MS = 1.0
CHANCE = 0.01
"""A change is clear when its two-sided p-value (Mann-Whitney) is at most this; a row where even the most
extreme ordering would be likelier than this by chance has too few samples to tell."""
EXACT_UP_TO = 400
"""Exact p-values up to this many sample pairs (20 x 20; counting the orderings costs about n*m*n*m),
the normal approximation beyond, where it is close."""
SLOWER, FASTER, NOISE, TOO_FEW = "slower", "faster", "inside the noise", "too few samples to tell"
"""What a row's change is (:func:`told`)."""


Process = tuple[int | None, int | None]
"""A process of a run: ``(rank, None)`` for a trainer rank, ``(None, replica_rank)`` for a rollout replica;
:data:`ACROSS` for a row across processes."""
ACROSS: Process = (None, None)


@dataclass
class Samples:
    """One row on one side: the time compared (``ms``) and the samples its noise is judged from."""

    ms: float
    values: list[float]
    """Per compared step and process (see the module's definitions)."""
    noise_ms: float = 0.0
    """The widest step-to-step range of one process's time (:func:`rlprof.analysis.noise.spread` of its
    times over the compared steps; the step times for ``(step)`` across processes)."""

    @property
    def spread(self) -> list[float]:
        """``[min, max]`` of the samples."""
        return [min(self.values), max(self.values)]


@dataclass
class Change:
    region: str
    rank: int | None
    """None: across processes (the median), or a replica's row; a trainer rank with ``--ranks``."""
    a: Samples | None
    b: Samples | None
    replica_rank: int | None = None
    """A rollout replica's row with ``--ranks``."""
    moved: str | None = None
    """Which part of the region moved most (``exposed comm +3.20 ms``), from both runs' traces
    (:func:`rlprof.analysis.inside.moved`); None when they are not on this disk, or for the step."""
    step_ms: float | None = None
    """A's step time (the median over its compared steps): the floor a change must pass (:func:`told`)."""

    @property
    def a_ms(self) -> float | None:
        return None if self.a is None else self.a.ms

    @property
    def b_ms(self) -> float | None:
        return None if self.b is None else self.b.ms

    @property
    def told(self) -> str:
        """:data:`SLOWER`, :data:`FASTER`, :data:`NOISE` or :data:`TOO_FEW`; "" for a row in one run only."""
        if self.a is None or self.b is None:
            return ""
        return told(self.a.values, self.b.values, ms=(self.a.ms, self.b.ms), noise_ms=max(self.a.noise_ms, self.b.noise_ms),
                    step_ms=self.step_ms)

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

    @property
    def said(self) -> str:
        """The text's last column: the verdict (:func:`_said`), then the note, as ``--json`` gives both."""
        return "; ".join(part for part in (_said(self.told), self.note) if part)

    def as_dict(self) -> dict[str, Any]:
        pct = self.change_pct
        side = {f"{k}_{field}": None if v is None else value(v)
                for k, v in (("a", self.a), ("b", self.b))
                for field, value in (("ms", lambda x: round(x.ms, 3)), ("spread_ms", lambda x: [round(y, 3) for y in x.spread]),
                                     ("samples", lambda x: len(x.values)))}
        return {"region": self.region, "rank": self.rank, "replica_rank": self.replica_rank, **side, "name": self.name,
                "change_ms": round(self.change_ms, 3), "change_pct": None if pct is None else round(pct, 2),
                "change": self.told, "note": self.note}


def told(a: Sequence[float], b: Sequence[float], *, ms: tuple[float, float] | None = None, noise_ms: float | None = None,
         step_ms: float | None = None) -> str:
    """Whether B's samples stand clear of the noise of both runs (module docstring: "Noise"). ``ms``: the
    times compared, A's and B's (default: the samples' medians); ``noise_ms``: the widest step-to-step range
    of a process in either run (default: each side's samples taken as one process's); ``step_ms``: A's step
    time, which sets the floor (:func:`rlprof.analysis.noise.floor_ms`)."""
    if 2 / math.comb(len(a) + len(b), len(a)) > CHANCE:
        return TOO_FEW
    above, p = mann_whitney(a, b)
    a_ms, b_ms = ms or (statistics.median(a), statistics.median(b))
    noise = max(spread(a), spread(b)) if noise_ms is None else noise_ms
    if p > CHANCE or not stands_clear(abs(b_ms - a_ms), noise, a_ms, MARGIN, step_ms):
        return NOISE
    return SLOWER if above > len(a) * len(b) / 2 else FASTER


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mann-Whitney's U for B above A (pairs with B's sample higher; a tie counts half) and its two-sided
    p-value: exact (the null distribution counted over every ordering) up to :data:`EXACT_UP_TO` pairs,
    else the normal approximation with continuity correction."""
    n, m = len(a), len(b)
    above = _rank_sum(a, b) - m * (m + 1) / 2
    tail = min(above, n * m - above)
    if n * m <= EXACT_UP_TO:
        counts = _u_counts(n, m)
        p = 2 * sum(counts[: math.floor(tail) + 1]) / math.comb(n + m, n)
    else:
        z = (n * m / 2 - tail - 0.5) / math.sqrt(n * m * (n + m + 1) / 12)
        p = math.erfc(max(z, 0.0) / math.sqrt(2))
    return above, min(1.0, p)


def _rank_sum(a: Sequence[float], b: Sequence[float]) -> float:
    """The sum of B's ranks among all samples (ties share their mean rank): U plus ``m(m+1)/2``, found
    in one sort rather than over every pair (thousands of processes give millions of pairs)."""
    ordered = sorted([(x, False) for x in a] + [(y, True) for y in b])
    total, i = 0.0, 0
    while i < len(ordered):
        j = i
        while j < len(ordered) and ordered[j][0] == ordered[i][0]:
            j += 1
        rank = (i + 1 + j) / 2  # ranks i+1..j share their mean
        total += rank * sum(1 for k in range(i, j) if ordered[k][1])
        i = j
    return total


@functools.lru_cache(maxsize=64)
def _u_counts(n: int, m: int) -> list[int]:
    """How many orderings of n A's and m B's give each U (pairs with the B above the A), U = 0..n*m.
    Built by adding the largest sample last: a B above ``i`` A's adds ``i``."""
    rows = [[1]] * (m + 1)  # rows[j]: the counts for 0 A's and j B's
    for i in range(1, n + 1):
        new = [[1]]  # i A's and no B: U = 0 once
        for j in range(1, m + 1):
            last_a, last_b = rows[j], new[j - 1]
            counts = [0] * (i * j + 1)
            for u, c in enumerate(last_a):
                counts[u] += c
            for u, c in enumerate(last_b):
                counts[u + i] += c
            new.append(counts)
        rows = new
    return rows[m]


def compared_steps(anatomy: Anatomy) -> list[StepTime]:
    """The profiled steps a side is compared on: all but the first when there are more (warm-up)."""
    return anatomy.steps[1:] if len(anatomy.steps) > 1 else anatomy.steps


def left_out(anatomy: Anatomy) -> int | None:
    """The warm-up step :func:`compared_steps` leaves out, if any."""
    return anatomy.steps[0].step if len(anatomy.steps) > 1 else None


def region_times(anatomy: Anatomy, per_rank: bool) -> dict[tuple[str, Process], Samples]:
    """``(region, process or ACROSS) -> Samples`` for one run over its compared steps, with the step itself
    as :data:`STEP_ROW` (per process: its ``step`` records; across processes: the step times)."""
    steps = compared_steps(anatomy)
    by_row: dict[tuple[str, Process], dict[Process, list[float]]] = {}
    """row -> process -> its time per compared step"""
    for step in steps:
        for region in step.regions:
            for t in region.spread.per_rank:
                row = (region.region, _process(t) if per_rank else ACROSS)
                by_row.setdefault(row, {}).setdefault(_process(t), []).append(t.ms)
        if per_rank:
            for t in (step.spread.per_rank if step.spread else []):
                by_row.setdefault((STEP_ROW, _process(t)), {}).setdefault(_process(t), []).append(t.ms)
    times = {row: Samples(statistics.median(statistics.median(ms) for ms in per_process.values()),
                          [x for ms in per_process.values() for x in ms], max(spread(ms) for ms in per_process.values()))
             for row, per_process in by_row.items()}
    spans = [step.span_ms for step in steps if step.span_ms is not None]
    if spans and not per_rank:
        times[STEP_ROW, ACROSS] = Samples(statistics.median(spans), spans, spread(spans))
    return times


def compare(a: RunReport, b: RunReport, per_rank: bool = False) -> list[Change]:
    """Every region (and process) of either run, the largest absolute change first."""
    ta, tb = region_times(a.anatomy, per_rank), region_times(b.anatomy, per_rank)
    for times, run in ((ta, a), (tb, b)):  # the rollout's tail and slowest request, every step (their figures)
        for row, (values, noise) in request_samples(run.requests, per_rank).items():
            times[row] = Samples(statistics.median(values), values, noise)
    spans = [s.span_ms for s in compared_steps(a.anatomy) if s.span_ms is not None]
    step_ms = statistics.median(spans) if spans else None
    changes = [Change(region, who[0], ta.get((region, who)), tb.get((region, who)), who[1], step_ms=step_ms)
               for region, who in set(ta) | set(tb)]
    return sorted(changes, key=lambda c: (-abs(c.change_ms), c.region, -1 if c.name is None else process_order(c.rank, c.replica_rank)))


def _process(t: RankTime) -> Process:
    return (t.rank, None) if t.replica_rank is None else (None, t.replica_rank)


def above(changes: Sequence[Change], pct: float, min_ms: float = MIN_MS) -> list[Change]:
    """Rows that got more than ``pct`` percent slower (and are at least ``min_ms`` long in one run), clear or not."""
    return [c for c in changes if c.change_pct is not None and c.change_pct > pct and max(c.a_ms, c.b_ms) >= min_ms]


def regressions(changes: Sequence[Change], pct: float, min_ms: float = MIN_MS) -> list[Change]:
    """Rows that got more than ``pct`` percent slower, clearly (:func:`told`)."""
    return [c for c in above(changes, pct, min_ms) if c.told == SLOWER]


def render(a: RunReport, b: RunReport, changes: Sequence[Change], per_rank: bool) -> str:
    lines = [_side_line("A", a), _side_line("B", b),
             "times: per process the median over compared steps, then the median across processes; (step): the median step time"
             if not per_rank else "times: each process's median over compared steps",
             "spread: min-max of the samples (each compared step and process); clearly: a Mann-Whitney test over them, p <= 1%, "
             "and a change past every process's own step-to-step range (docs/analysis.md, \"Noise\")", ""]
    head = ["region"] + (["process"] if per_rank else []) + ["A ms", "A spread", "B ms", "B spread", "change ms", "change", ""]
    rows = [tuple(head)]
    for c in changes:
        cells = [c.region] + ([c.name or "-"] if per_rank else []) + [
            _ms(c.a), _spread(c.a), _ms(c.b), _spread(c.b),
            f"{c.change_ms:+.2f}", "-" if c.change_pct is None else f"{c.change_pct:+.1f}%", c.said]
        rows.append(tuple(cells))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        first = row[0].ljust(widths[0])
        rest = [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
        lines.append(("  ".join([first] + rest) + ("  " + row[-1] if row[-1] else "")).rstrip())
    told_rows = [c.told for c in changes if c.told]
    if told_rows and all(t == TOO_FEW for t in told_rows):
        lines += ["", "too few samples to tell any change from noise (5 a side at least): profile more steps or compare more processes"]
    lines += compare_lines(a, b)
    return "\n".join(lines)


def _side_line(side: str, run: RunReport) -> str:
    steps, skipped = len(run.anatomy.steps), left_out(run.anatomy)
    compared = f"step {skipped} left out as warm-up, {steps - 1} compared" if skipped is not None else "all compared"
    return f"{side}: run {run.run_id} ({steps} profiled step{'s' if steps != 1 else ''}: {compared}; {len(run.processes)} processes)"


def _ms(side: Samples | None) -> str:
    return "-" if side is None else f"{side.ms:.2f}"


def _spread(side: Samples | None) -> str:
    return "-" if side is None else "{:.2f}-{:.2f}".format(*side.spread)


def _said(told_as: str) -> str:
    """A row's verdict in words: a clear change says so; noise and too few samples say that ("" in one run only)."""
    return f"clearly {told_as}" if told_as in (SLOWER, FASTER) else told_as


