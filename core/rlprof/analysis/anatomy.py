"""Step anatomy: where a profiled step's time went, per region and rank, from the manifest alone.

The core writes a ``step`` record per profiled step per process and a ``region`` record per region
of a selected role (wall-clock ``start_ns``/``end_ns`` on the host's shared clock, see
:mod:`rlprof.manifest`). This module turns them into the numbers a report prints; it never opens a
trace, so it costs the same for 1 MB or 1 TB of traces, and works after traces were moved away or
for backends whose files nobody can read here (nsys, npu).

Definitions (one place, used by ``report``, ``report --html`` and ``compare``):

* A rank's time in a region in a step is the sum of that region's records on that rank in that
  step (a region entered twice counts twice; ``count`` says how often).
* ``min_ms``, ``median_ms``, ``max_ms`` are over the ranks that ran the region; ``slowest_rank`` has
  ``max_ms`` (the lowest such rank on a tie).
* A step's time on a rank is its ``step`` record's duration (the longest, when several processes
  share a rank); the step's ``median_ms`` is over ranks.
* ``share_of_step`` is the region's ``median_ms`` over the step's ``median_ms``. Only top-level
  regions (``depth`` 0) add up towards the step: a nested region's time is inside its parent's.
  ``untracked_ms`` is what top-level regions leave of the step (gaps, controller work).
* A rank straggles in a region when its time exceeds the region's median by more than
  ``straggler_pct`` percent *and* by more than :data:`STRAGGLER_FLOOR` of the step's median time (so
  microsecond noise in tiny regions is not flagged).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from rlprof.roles import ROLES

STRAGGLER_PCT = 25.0
"""Default: a rank more than 25% over the region's median across ranks straggles."""

STRAGGLER_FLOOR = 0.01
"""...and more than 1% of the step's median time over it."""


@dataclass
class RankTime:
    """One rank's time in a region (or step)."""

    rank: int
    host: str
    ms: float
    count: int = 1


@dataclass
class Spread:
    """Across ranks: ``min_ms``, ``median_ms``, ``max_ms`` and which rank is slowest."""

    per_rank: list[RankTime]
    min_ms: float
    median_ms: float
    max_ms: float
    slowest_rank: int

    @classmethod
    def of(cls, per_rank: list[RankTime]) -> "Spread":
        per_rank = sorted(per_rank, key=lambda t: t.rank)
        times = [t.ms for t in per_rank]
        slowest = max(per_rank, key=lambda t: (t.ms, -t.rank))
        return cls(per_rank, min(times), statistics.median(times), max(times), slowest.rank)


@dataclass
class RegionTime:
    """One region in one step, across ranks."""

    step: int
    region: str
    role: str
    depth: int
    parent: str | None
    spread: Spread
    share_of_step: float | None
    stragglers: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """``rank N: ExceptionType: message`` for each record whose code raised."""
    iterations: dict[int, list[list[int]]] = field(default_factory=dict)
    """Rank -> the sampled iteration spans ``[first, last]`` it captured (sampled regions only)."""

    def as_dict(self) -> dict[str, Any]:
        s = self.spread
        return {
            "region": self.region, "role": self.role, "depth": self.depth, "parent": self.parent,
            "min_ms": _r(s.min_ms), "median_ms": _r(s.median_ms), "max_ms": _r(s.max_ms), "slowest_rank": s.slowest_rank,
            "share_of_step": None if self.share_of_step is None else round(self.share_of_step, 4),
            "stragglers": self.stragglers, "errors": self.errors,
            "per_rank": [{"rank": t.rank, "host": t.host, "ms": _r(t.ms), "count": t.count} for t in s.per_rank],
            "iterations": {str(k): v for k, v in self.iterations.items()},
        }


@dataclass
class StepTime:
    """One profiled step: its time across ranks and its regions."""

    step: int
    spread: Spread | None
    """None when no process wrote the step's ``step`` record (it died inside the step)."""
    regions: list[RegionTime]
    start_ns: int | None
    end_ns: int | None

    @property
    def tracked_ms(self) -> float:
        return sum(r.spread.median_ms for r in self.regions if r.depth == 0)

    @property
    def untracked_ms(self) -> float | None:
        return None if self.spread is None else max(0.0, self.spread.median_ms - self.tracked_ms)

    def as_dict(self) -> dict[str, Any]:
        s = self.spread
        return {
            "step": self.step,
            "min_ms": _r(s.min_ms) if s else None, "median_ms": _r(s.median_ms) if s else None,
            "max_ms": _r(s.max_ms) if s else None, "slowest_rank": s.slowest_rank if s else None,
            "per_rank": [{"rank": t.rank, "host": t.host, "ms": _r(t.ms)} for t in s.per_rank] if s else [],
            "untracked_ms": None if self.untracked_ms is None else _r(self.untracked_ms),
            "regions": [r.as_dict() for r in self.regions],
        }


@dataclass
class RegionSummary:
    """One region over every profiled step: per rank the median of its per-step times, then the
    spread across ranks, and the median of its per-step ``share_of_step``."""

    region: str
    role: str
    depth: int
    steps: int
    spread: Spread
    share_of_step: float | None

    def as_dict(self) -> dict[str, Any]:
        s = self.spread
        return {
            "region": self.region, "role": self.role, "depth": self.depth, "steps": self.steps,
            "min_ms": _r(s.min_ms), "median_ms": _r(s.median_ms), "max_ms": _r(s.max_ms), "slowest_rank": s.slowest_rank,
            "share_of_step": None if self.share_of_step is None else round(self.share_of_step, 4),
            "per_rank": [{"rank": t.rank, "host": t.host, "ms": _r(t.ms)} for t in s.per_rank],
        }


@dataclass
class Straggler:
    step: int
    region: str
    rank: int
    host: str
    ms: float
    median_ms: float

    @property
    def over_pct(self) -> float:
        return 100.0 * (self.ms / self.median_ms - 1.0) if self.median_ms > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "region": self.region, "rank": self.rank, "host": self.host, "ms": _r(self.ms),
                "median_ms": _r(self.median_ms), "over_pct": round(self.over_pct, 1)}


@dataclass
class Anatomy:
    steps: list[StepTime]
    regions: list[RegionSummary]
    stragglers: list[Straggler]

    @property
    def has_timings(self) -> bool:
        return bool(self.steps)

    def as_dict(self) -> dict[str, Any]:
        return {"steps": [s.as_dict() for s in self.steps], "regions": [r.as_dict() for r in self.regions],
                "stragglers": [s.as_dict() for s in self.stragglers]}


def timing_record(record: dict[str, Any]) -> bool:
    """Is this a ``step`` or ``region`` record with every field the anatomy needs, well typed? (A
    manifest edited by hand or cut short must not break a report: such records are skipped.)
    Called once per record of a run: kept to plain type checks (``bool`` is not an ``int`` here)."""
    kind = record.get("type")
    if kind != "step" and kind != "region":
        return False
    try:
        step, rank, start, end, ms = record["step"], record["rank"], record["start_ns"], record["end_ns"], record["duration_ms"]
    except KeyError:
        return False
    if type(step) is not int or type(rank) is not int or type(start) is not int or type(end) is not int or end < start:
        return False
    if type(ms) is not float and type(ms) is not int:
        return False
    return kind == "step" or type(record.get("region")) is str


def step_anatomy(records: Iterable[dict[str, Any]], straggler_pct: float = STRAGGLER_PCT, *, checked: bool = False) -> Anatomy:
    """The anatomy of one run from its ``step`` and ``region`` records (other records, and timing
    records missing a field, are ignored: see :func:`timing_record`; ``checked``: the caller already
    left those out)."""
    step_times: dict[int, dict[int, RankTime]] = {}
    spans: dict[int, list[int]] = {}
    region_times: dict[tuple[int, str], dict[int, RankTime]] = {}
    shape: dict[str, tuple[str, int, str | None]] = {}
    first_seen: dict[str, int] = {}
    errors: dict[tuple[int, str], list[str]] = {}
    iterations: dict[tuple[int, str], dict[int, list[list[int]]]] = {}
    for r in records:
        kind = r.get("type")
        if (kind != "step" and kind != "region") or not (checked or timing_record(r)):
            continue
        if kind == "step":
            step, rank = r["step"], r["rank"]
            ms = float(r["duration_ms"])
            known = step_times.setdefault(step, {}).get(rank)
            if known is None or ms > known.ms:
                step_times[step][rank] = RankTime(rank, r.get("host", "?"), ms)
            span = spans.setdefault(step, [r["start_ns"], r["end_ns"]])
            span[0], span[1] = min(span[0], r["start_ns"]), max(span[1], r["end_ns"])
        elif kind == "region":
            step, rank, name = r["step"], r["rank"], r["region"]
            if name not in shape:
                shape[name] = (r.get("role") or name.split("_")[0], int(r.get("depth") or 0), r.get("parent"))
                first_seen[name] = r["start_ns"]
            elif r["start_ns"] < first_seen[name]:
                first_seen[name] = r["start_ns"]
            cell = region_times.setdefault((step, name), {})
            known = cell.get(rank)
            if known is None:
                cell[rank] = RankTime(rank, r.get("host", "?"), float(r["duration_ms"]))
            else:
                known.ms += float(r["duration_ms"])
                known.count += 1
            if r.get("error"):
                errors.setdefault((step, name), []).append(f"rank {rank}: {r['error']}")
            if r.get("iterations"):
                iterations.setdefault((step, name), {}).setdefault(rank, []).append(list(r["iterations"]))

    order = sorted(shape, key=lambda n: (first_seen[n], _role_index(shape[n][0]), n))
    steps: list[StepTime] = []
    stragglers: list[Straggler] = []
    for step in sorted(set(step_times) | {s for s, _ in region_times}):
        spread = Spread.of(list(step_times[step].values())) if step in step_times else None
        regions = []
        for name in order:
            per_rank = region_times.get((step, name))
            if not per_rank:
                continue
            role, depth, parent = shape[name]
            rs = Spread.of(list(per_rank.values()))
            share = rs.median_ms / spread.median_ms if spread and spread.median_ms > 0 else None
            slow = _stragglers(rs, spread, straggler_pct)
            stragglers += [Straggler(step, name, t.rank, t.host, t.ms, rs.median_ms) for t in slow]
            regions.append(RegionTime(step, name, role, depth, parent, rs, share, [t.rank for t in slow],
                                      errors.get((step, name), []), iterations.get((step, name), {})))
        span = spans.get(step)
        steps.append(StepTime(step, spread, regions, span[0] if span else None, span[1] if span else None))
    return Anatomy(steps, _summaries(steps, order, shape), stragglers)


def _stragglers(region: Spread, step: Spread | None, pct: float) -> list[RankTime]:
    if len(region.per_rank) < 2:
        return []
    floor = STRAGGLER_FLOOR * step.median_ms if step else 0.0
    return [t for t in region.per_rank
            if t.ms > region.median_ms * (1 + pct / 100.0) and t.ms - region.median_ms > floor]


def _summaries(steps: list[StepTime], order: list[str], shape: dict) -> list[RegionSummary]:
    summaries = []
    for name in order:
        found = [r for s in steps for r in s.regions if r.region == name]
        by_rank: dict[int, list[RankTime]] = {}
        for r in found:
            for t in r.spread.per_rank:
                by_rank.setdefault(t.rank, []).append(t)
        per_rank = [RankTime(rank, ts[0].host, statistics.median(t.ms for t in ts), len(ts)) for rank, ts in by_rank.items()]
        shares = [r.share_of_step for r in found if r.share_of_step is not None]
        role, depth, _ = shape[name]
        summaries.append(RegionSummary(name, role, depth, len(found), Spread.of(per_rank),
                                       statistics.median(shares) if shares else None))
    return summaries


def _role_index(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def _r(ms: float) -> float:
    return round(ms, 3)
