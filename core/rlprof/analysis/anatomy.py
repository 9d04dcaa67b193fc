"""Step anatomy: where a profiled step's time went, per region and process, from the manifest alone.

The core writes a ``step`` record per profiled step per process and a ``region`` record per region
of a selected role (wall-clock ``start_ns``/``end_ns`` on the host's shared clock, see
:mod:`rlprof.manifest`). This module turns them into the numbers a report prints; it never opens a
trace, so it costs the same for 1 MB or 1 TB of traces, and works after traces were moved away or
for backends whose files nobody can read here (nsys, npu).

A run's processes are trainer ranks ("rank N") and, in verl's agent-loop mode, rollout replicas
("replica N": the process record's ``replica_rank``; a replica's ``rank`` may equal a trainer
rank's, so the two are never merged or named alike). Definitions (one place, used by ``report``,
``report --html`` and ``compare``):

* A process's time in a region in a step is the sum of that region's records on it in that step (a
  region entered twice counts twice; ``count`` says how often).
* ``min_ms``, ``median_ms``, ``max_ms`` are over the processes that ran the region; ``slowest`` names
  the one with ``max_ms`` (trainer ranks before replicas, lowest first, on a tie).
* The **step time** (``span_ms``) is the step's window: from the first start to the last end of the
  trainer ranks' ``step`` records (every process's when no trainer rank recorded the step). The
  per-process step times (``min_ms``/``median_ms``/``max_ms`` of the step) are over the same records.
* ``share_of_step`` is the region's ``median_ms`` over the step time. ``untracked_ms`` ("outside
  regions") is the part of the step window that no top-level region (``depth`` 0) of *any* process
  covers: the union of their intervals on the shared wall clock. Generation in a replica therefore
  counts as inside, and time every process spent outside regions (gaps, controller work) as outside.
  A nested region's time is inside its parent's.
* What "outside regions" holds: its **gaps**, the stretches of the step window that no top-level
  region nor a capture being written covers, the largest :data:`GAPS` first, each with its
  neighbours: the region that ended last before it and the one that began first after it, with
  their process (``after rank 0 actor_update, before replica 0 rollout_generate``). A gap at the
  window's edge has one neighbour. Gaps under :data:`GAP_FLOOR_MS` are not listed. Where the driver
  timed its own phases in the step (``phase`` records: verl's trainer's ``timing_s/*``), the outside
  time is also given per phase: each instant of it goes to the innermost (shortest) phase around it,
  and what no phase covers is ``(no phase)``.
* A process straggles in a region when its excess over the *other* processes' median (with two, the
  other's time; its own left out, so it does not pull up its reference) **stands clear** of the noise
  (:mod:`rlprof.analysis.noise`): it passes the noise by ``straggler_pct`` percent of that median and by
  the floor (1 ms, or 1% of the step's median time). The noise is how much processes differ anyway: the
  widest step-to-step range (over the profiled steps) of any other process's deviation from the others'
  median in that region (0 with a single step); what moves every process alike (warm-up, the machine's
  load) is no difference between them. A process slow in one step by no more than the others vary anyway
  is not a straggler: two runs of the same code flagged different processes at random before the noise
  counted (issue 34: 2 flags, then 0), and 2 ms demo regions 1 ms apart were flagged before the margins
  were counted beyond it (issue 40).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from rlprof.analysis.noise import bar_ms, between_processes, others_medians
from rlprof.analysis.outside_regions import GAP_FLOOR_MS, Gap, by_phase, gaps_outside, is_phase  # noqa: F401  (GAP_FLOOR_MS re-exported)
from rlprof.intervals import clip, length, union
from rlprof.roles import ROLES

STRAGGLER_PCT = 25.0
"""Default: a process whose time passes the other processes' median by the noise and 25% of that median
(and the floor) straggles."""

GAPS = 3
"""How many of a step's largest gaps outside regions are named."""



def process_name(rank: int, replica_rank: int | None) -> str:
    """How a process is named everywhere: ``rank 3`` (a trainer rank) or ``replica 0`` (a rollout replica)."""
    return f"rank {rank}" if replica_rank is None else f"replica {replica_rank}"


REPLICAS_AFTER = 1 << 40
"""Sort position of replica 0: after any trainer rank."""


def process_order(rank: int, replica_rank: int | None) -> int:
    """Trainer ranks first, then replicas, each by number: the order every listing uses (an int:
    sorting tens of thousands of times per report, it must be cheap)."""
    return rank if replica_rank is None else REPLICAS_AFTER + replica_rank


@dataclass(slots=True)
class RankTime:
    """One process's time in a region (or step): a trainer rank, or a replica (``replica_rank`` set)."""

    rank: int
    host: str
    ms: float
    count: int = 1
    replica_rank: int | None = None
    start_ns: int | None = None
    """A region's: when this process first entered it in the step (the host's shared clock); who entered late."""
    key: int = field(init=False, repr=False, compare=False)
    """:func:`process_order` of this process: what sorts and groups processes (read more often than built)."""

    def __post_init__(self) -> None:
        self.key = self.rank if self.replica_rank is None else REPLICAS_AFTER + self.replica_rank

    @property
    def name(self) -> str:
        return process_name(self.rank, self.replica_rank)

    def as_dict(self, count: bool = True) -> dict[str, Any]:
        out = {"rank": self.rank, "replica_rank": self.replica_rank, "name": self.name, "host": self.host, "ms": _r(self.ms)}
        return {**out, "count": self.count} if count else out


@dataclass
class Spread:
    """Across processes: ``min_ms``, ``median_ms``, ``max_ms`` and which process is slowest."""

    per_rank: list[RankTime]
    min_ms: float
    median_ms: float
    max_ms: float
    slowest: RankTime

    @classmethod
    def of(cls, per_rank: list[RankTime]) -> "Spread":
        per_rank = sorted(per_rank, key=lambda t: t.key)
        times = [t.ms for t in per_rank]
        slowest = max(per_rank, key=lambda t: (t.ms, -t.key))
        return cls(per_rank, min(times), statistics.median(times), max(times), slowest)

    def as_dict(self, count: bool = True) -> dict[str, Any]:
        """``min_ms``... and the slowest process: ``slowest_rank`` (a trainer rank, else None),
        ``slowest_replica`` (a replica, else None) and ``slowest`` (its name)."""
        s = self.slowest
        return {"min_ms": _r(self.min_ms), "median_ms": _r(self.median_ms), "max_ms": _r(self.max_ms),
                "slowest_rank": s.rank if s.replica_rank is None else None, "slowest_replica": s.replica_rank,
                "slowest": s.name, "per_rank": [t.as_dict(count) for t in self.per_rank]}


@dataclass
class RegionTime:
    """One region in one step, across the processes that ran it."""

    step: int
    region: str
    role: str
    depth: int
    parent: str | None
    spread: Spread
    share_of_step: float | None
    stragglers: list[RankTime] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """``rank N: ExceptionType: message`` (``replica N: ...``) for each record whose code raised."""
    iterations: dict[str, list[list[int]]] = field(default_factory=dict)
    """Process name -> the sampled iteration spans ``[first, last]`` it captured (sampled regions only)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "region": self.region, "role": self.role, "depth": self.depth, "parent": self.parent, **self.spread.as_dict(),
            "share_of_step": None if self.share_of_step is None else round(self.share_of_step, 4),
            "stragglers": [t.name for t in self.stragglers], "errors": self.errors, "iterations": self.iterations,
        }


@dataclass
class StepTime:
    """One profiled step: its window, the per-process step times, its regions and what they leave."""

    step: int
    spread: Spread | None
    """Per-process step times (trainer ranks'; None when no process wrote the step's ``step`` record: it died inside the step)."""
    regions: list[RegionTime]
    start_ns: int | None
    end_ns: int | None
    """The step window (see the module's definitions)."""
    covered_ms: float = 0.0
    """How much of the window top-level regions of any process cover (their union)."""
    writing_ms: float = 0.0
    """How much more of the window profiling itself took, writing the captures it closed (a trace
    exported at a step's or a discrete region's end, from ``closed_ns``), where no region covers it."""
    gaps: list[Gap] = field(default_factory=list)
    """The largest stretches outside regions, with their neighbours (largest first)."""
    phases: list[tuple[str, float]] = field(default_factory=list)
    """``(phase, ms)``: the outside time per driver phase (largest first); empty without ``phase`` records."""
    phase_source: str | None = None
    """Who timed the phases (``verl timing_s``)."""

    @property
    def span_ms(self) -> float | None:
        """The step time: its window, first start to last end."""
        return None if self.start_ns is None or self.end_ns is None else (self.end_ns - self.start_ns) / 1e6

    @property
    def tracked_ms(self) -> float:
        """The top-level regions' medians added up (more than the step when processes overlap)."""
        return sum(r.spread.median_ms for r in self.regions if r.depth == 0)

    @property
    def untracked_ms(self) -> float | None:
        span = self.span_ms
        return None if span is None else max(0.0, span - self.covered_ms - self.writing_ms)

    def as_dict(self) -> dict[str, Any]:
        s = self.spread
        spread = s.as_dict(count=False) if s else {"min_ms": None, "median_ms": None, "max_ms": None, "slowest_rank": None,
                                                   "slowest_replica": None, "slowest": None, "per_rank": []}
        span, untracked = self.span_ms, self.untracked_ms
        return {"step": self.step, "span_ms": None if span is None else _r(span), **spread,
                "untracked_ms": None if untracked is None else _r(untracked), "writing_ms": _r(self.writing_ms),
                "outside": [g.as_dict() for g in self.gaps],
                "outside_phases": [{"name": name, "ms": _r(ms), "source": self.phase_source} for name, ms in self.phases],
                "regions": [r.as_dict() for r in self.regions]}


@dataclass
class RegionSummary:
    """One region over every profiled step: per process the median of its per-step times, then the
    spread across processes, and the median of its per-step ``share_of_step``."""

    region: str
    role: str
    depth: int
    steps: int
    spread: Spread
    share_of_step: float | None

    def as_dict(self) -> dict[str, Any]:
        return {"region": self.region, "role": self.role, "depth": self.depth, "steps": self.steps, **self.spread.as_dict(),
                "share_of_step": None if self.share_of_step is None else round(self.share_of_step, 4)}


@dataclass
class Straggler:
    step: int
    region: str
    time: RankTime
    median_ms: float
    """The median of the *other* processes' times in the region in that step (with two, the other's)."""
    noise_ms: float = 0.0
    """The noise it stood clear of (module docstring)."""
    bar_ms: float = 0.0
    """How far past ``median_ms`` it had to be to stand clear (:func:`rlprof.analysis.noise.bar_ms`): the
    noise and the margins (:mod:`rlprof.analysis.inside` judges it again less a wait with the same margins)."""

    @property
    def over_pct(self) -> float:
        return 100.0 * (self.time.ms / self.median_ms - 1.0) if self.median_ms > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        t = self.time
        return {"step": self.step, "region": self.region, "rank": t.rank, "replica_rank": t.replica_rank, "name": t.name,
                "host": t.host, "ms": _r(t.ms), "median_ms": _r(self.median_ms), "over_pct": round(self.over_pct, 1)}


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


def replica_ranks(records: Iterable[dict[str, Any]]) -> dict[tuple[int, str, int], int]:
    """``(rank, host, pid) -> replica_rank`` of every replica's process, from the ``process`` records
    (timing records carry only the common ``rank``, ``host``, ``pid``)."""
    return {(r["rank"], r.get("host", "?"), r.get("pid", 0)): r["replica_rank"] for r in records
            if r.get("type") == "process" and type(r.get("replica_rank")) is int and type(r.get("rank")) is int}


def replica_of(record: dict[str, Any], replicas: dict[tuple[int, str, int], int]) -> int | None:
    """The replica a record comes from (its own ``replica_rank``, else its process's), or None for a trainer rank."""
    own = record.get("replica_rank")
    return own if type(own) is int else replicas.get((record["rank"], record.get("host", "?"), record.get("pid", 0)))


def step_anatomy(records: Iterable[dict[str, Any]], straggler_pct: float = STRAGGLER_PCT, *, checked: bool = False) -> Anatomy:
    """The anatomy of one run from its ``process``, ``step`` and ``region`` records (other records,
    and timing records missing a field, are ignored: see :func:`timing_record`; ``checked``: the
    caller already left those out). ``process`` records tell replicas from trainer ranks."""
    records = list(records)
    replicas = replica_ranks(records)
    step_times: dict[int, dict[tuple, RankTime]] = {}
    windows: dict[int, dict[bool, list[int]]] = {}
    """step -> {is a replica's: [first start, last end]}"""
    region_times: dict[tuple[int, str], dict[tuple, RankTime]] = {}
    intervals: dict[int, list[tuple[int, int]]] = {}
    writing: dict[int, list[tuple[int, int]]] = {}
    labels: dict[int, list[tuple[int, int, str]]] = {}
    """step -> (start, end, "<process> <region>") of every top-level region: the gaps' neighbours"""
    """step -> when captures were being written (``end_ns`` to ``closed_ns`` of step and region records)"""
    shape: dict[str, tuple[str, int, str | None]] = {}
    first_seen: dict[str, int] = {}
    errors: dict[tuple[int, str], list[str]] = {}
    iterations: dict[tuple[int, str], dict[str, list[list[int]]]] = {}
    phases: dict[int, list[tuple[int, int, str, str]]] = {}
    """step -> (start, end, name, source) of the driver's phases"""
    for r in records:
        kind = r.get("type")
        if kind == "phase":
            if checked or is_phase(r):
                phases.setdefault(r["step"], []).append((r["start_ns"], r["end_ns"], r["name"], str(r.get("source") or "")))
            continue
        if (kind != "step" and kind != "region") or not (checked or timing_record(r)):
            continue
        step, rank = r["step"], r["rank"]
        closed = r.get("closed_ns")
        if closed and closed > r["end_ns"]:
            writing.setdefault(step, []).append((r["end_ns"], closed))
        replica = replica_of(r, replicas) if replicas or "replica_rank" in r else None
        who = rank if replica is None else REPLICAS_AFTER + replica  # process_order, inlined: once per record
        if kind == "step":
            ms = float(r["duration_ms"])
            known = step_times.setdefault(step, {}).get(who)
            if known is None or ms > known.ms:
                step_times[step][who] = RankTime(rank, r.get("host", "?"), ms, replica_rank=replica)
            window = windows.setdefault(step, {}).setdefault(replica is not None, [r["start_ns"], r["end_ns"]])
            window[0], window[1] = min(window[0], r["start_ns"]), max(window[1], r["end_ns"])
            continue
        name = r["region"]
        if name not in shape:
            shape[name] = (r.get("role") or name.split("_")[0], int(r.get("depth") or 0), r.get("parent"))
            first_seen[name] = r["start_ns"]
        elif r["start_ns"] < first_seen[name]:
            first_seen[name] = r["start_ns"]
        if not r.get("depth"):
            intervals.setdefault(step, []).append((r["start_ns"], r["end_ns"]))
            labels.setdefault(step, []).append((r["start_ns"], r["end_ns"], f"{process_name(rank, replica)} {name}"))
        cell = region_times.setdefault((step, name), {})
        known = cell.get(who)
        if known is None:
            cell[who] = RankTime(rank, r.get("host", "?"), float(r["duration_ms"]), replica_rank=replica, start_ns=r["start_ns"])
        else:
            known.ms += float(r["duration_ms"])
            known.count += 1
            known.start_ns = min(known.start_ns, r["start_ns"])
        if r.get("error"):
            errors.setdefault((step, name), []).append(f"{process_name(rank, replica)}: {r['error']}")
        if r.get("iterations"):
            iterations.setdefault((step, name), {}).setdefault(process_name(rank, replica), []).append(list(r["iterations"]))

    order = sorted(shape, key=lambda n: (first_seen[n], _role_index(shape[n][0]), n))
    noise = _noise_ms(region_times)
    steps: list[StepTime] = []
    stragglers: list[Straggler] = []
    for step in sorted(set(step_times) | {s for s, _ in region_times}):
        trainer_only = [t for t in step_times.get(step, {}).values() if t.replica_rank is None]
        spread = Spread.of(trainer_only or list(step_times[step].values())) if step in step_times else None
        window = windows.get(step, {})
        start, end = window.get(False) or window.get(True) or (None, None)
        span_ms = None if start is None else (end - start) / 1e6
        regions = []
        for name in order:
            per_rank = region_times.get((step, name))
            if not per_rank:
                continue
            role, depth, parent = shape[name]
            rs = Spread.of(list(per_rank.values()))
            share = rs.median_ms / span_ms if span_ms else None
            slow = _stragglers(rs, spread, straggler_pct, noise.get(name, {}))
            stragglers += [Straggler(step, name, t, others, noise.get(name, {}).get(t.key, 0.0), bar) for t, others, bar in slow]
            regions.append(RegionTime(step, name, role, depth, parent, rs, share, [t for t, _, _ in slow],
                                      errors.get((step, name), []), iterations.get((step, name), {})))
        covered = _covered_ns(intervals.get(step, []), start, end) / 1e6 if start is not None else 0.0
        written = 0.0
        if start is not None and step in writing:
            written = _covered_ns(intervals.get(step, []) + writing[step], start, end) / 1e6 - covered
        stretches = gaps_outside(labels.get(step, []), writing.get(step, []), start, end) if start is not None and regions else []
        named = [g for g in stretches if g.ms >= GAP_FLOOR_MS]
        gaps = sorted(named, key=lambda g: -g.ms)[:GAPS]
        outside = by_phase(phases.get(step, []), stretches, start) if stretches else []
        source = phases[step][0][3] if outside else None
        steps.append(StepTime(step, spread, regions, start, end, covered, written, gaps, outside, source))
    return Anatomy(steps, _summaries(steps, order, shape), stragglers)


def _covered_ns(intervals: list[tuple[int, int]], start: int, end: int) -> int:
    """How much of ``[start, end]`` the union of ``intervals`` covers (overlaps counted once)."""
    return length(clip(union(intervals), start, end))


def _noise_ms(region_times: dict[tuple[int, str], dict[tuple, RankTime]]) -> dict[str, dict[int, float]]:
    """Region -> process -> the noise of its difference from the others there (module docstring;
    :func:`rlprof.analysis.noise.between_processes`)."""
    by_region: dict[str, list[dict[int, float]]] = {}
    for (_, name), cell in region_times.items():
        by_region.setdefault(name, []).append({who: t.ms for who, t in cell.items()})
    return {name: between_processes(steps) for name, steps in by_region.items()}


def _stragglers(region: Spread, step: Spread | None, pct: float,
                noise_ms: dict[int, float]) -> list[tuple[RankTime, float, float]]:
    """``(process, the others' median, the bar)`` for each process whose excess over the other processes'
    median stands clear of the noise (:func:`rlprof.analysis.noise.bar_ms`: the noise, and ``pct``
    percent of that median or the floor)."""
    if len(region.per_rank) < 2:
        return []
    step_ms = step.median_ms if step else None
    others = others_medians({t.key: t.ms for t in region.per_rank})
    bars = {t.key: bar_ms(noise_ms.get(t.key, 0.0), others[t.key], pct / 100.0, step_ms) for t in region.per_rank}
    return [(t, others[t.key], bars[t.key]) for t in region.per_rank if t.ms - others[t.key] > bars[t.key]]


def _summaries(steps: list[StepTime], order: list[str], shape: dict) -> list[RegionSummary]:
    summaries = []
    for name in order:
        found = [r for s in steps for r in s.regions if r.region == name]
        by_process: dict[tuple, list[RankTime]] = {}
        for r in found:
            for t in r.spread.per_rank:
                by_process.setdefault(t.key, []).append(t)
        per_rank = [RankTime(ts[0].rank, ts[0].host, statistics.median(t.ms for t in ts), len(ts), ts[0].replica_rank)
                    for ts in by_process.values()]
        shares = [r.share_of_step for r in found if r.share_of_step is not None]
        role, depth, _ = shape[name]
        summaries.append(RegionSummary(name, role, depth, len(found), Spread.of(per_rank),
                                       statistics.median(shares) if shares else None))
    return summaries


def _role_index(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def _r(ms: float) -> float:
    return round(ms, 3)
