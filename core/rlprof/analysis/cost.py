"""What profiling cost each profiled step, beside the steps it did not profile.

**The cost of a profiled step is what it took beyond its unprofiled median**: its time minus the median
time of the run's unprofiled steps, both by one measure (:attr:`StepCost.profiling_ms`), the trainer's own
where it timed every step (verl's ``timing_s/step``, recorded as the ``step`` phase), else rlprof's step
records. That is the time the user lost, wherever profiling made the step wait: the captures being
written, a replica's export, and what no record names a wait (a trainer's weight sync held up by a
replica whose profiler held its GIL, a core busy with a stop). It is never less than what rlprof's own
records saw profiling take in the step (below): a median of a few unprofiled steps can be slower than the
profiled step itself (the async demo's last version drains the run: 820 ms against a profiled version's 526 ms,
of which 404 ms closing its captures), and profiling then did not cost nothing. Its share of the step is what the
verdict warns about (more than :data:`COST_WARN_SHARE`). The phases that grew are named beside it (the
trainer's phases in this step beside their unprofiled medians, :class:`PhaseCost`): where the time went.

What rlprof saw of it, shown beside the figure:

* **opening**: its captures opening, before the step's own start: the union of ``opened_ns`` to ``start_ns``
  of its ``step`` records;
* **writing**: the captures it closed being written: the union, over every process, of ``end_ns`` to
  ``closed_ns`` of its ``step`` and ``region`` records (a trace exported at a discrete region's end, and
  at the step's end, after the step's own window, which the anatomy's ``(writing captures)`` row leaves
  out);
* **waits**: any timing record whose type names a wait on profiling (``profiling_wait``, e.g. a rollout
  replica still exporting its trace when the next ``generate`` arrives), counted in the step it names:
  the union of their ``start_ns``..``end_ns`` (replicas waited on at once cost the step once), plus the
  ``duration_ms`` of any without those.

**Warm-up is not profiling.** The run's first step is slow whether profiled or not (allocators, kernels,
compilation, connections: verl's CPU example's step 1 took 13.5 s more than the others, unprofiled too), so it
is left out of the unprofiled median (:data:`WARMUP_STEPS`), and a profiled step that is warm-up has no cost
figure: its profiling cannot be told apart from its warm-up (:attr:`StepCost.warmup`; the report says so, the
verdict never warns about it, and what rlprof's records saw is still shown).

A run without unprofiled steps has no median to compare with: then the figure is what rlprof saw
(writing + waits), a lower bound, and :attr:`StepCost.unprofiled_ms` is None.

A profiled step's whole time runs from its first start (its ``opened_ns``, before its captures opened) to the
last moment any process was done with it (its ``closed_ns`` when captures were written after its end), and
covers the trainer's own timing of the
step where the run recorded it. A rollout replica's export is not writing: the replica writes while the
actor updates, and the trainer pays only what it waits for it. Unprofiled steps (``unprofiled_steps``
records, written by profiling processes and a Ray controller for the steps they did not profile; and the
trainer's ``step`` phase) give the comparison: each one's time taken as a profiled step's (first start to
last end over the processes that timed it), then their median.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Collection, Iterable

from rlprof.intervals import length, union

COST_WARN_SHARE = 0.20
"""Profiling taking more than this share of a profiled step is worth a warning."""
WARMUP_STEPS = 1
"""The run's first steps that are warm-up: left out of the unprofiled median, their own cost not told."""


STEP_PHASE = "step"
"""The phase that is the trainer's whole step (verl's ``timing_s/step``)."""
RLPROF_TIMING = "rlprof step records"
""":attr:`StepCost.timed_by` when the trainer did not time every step itself."""


@dataclass(frozen=True)
class PhaseCost:
    """One of the trainer's phases in a profiled step, beside its median over the unprofiled steps."""

    name: str
    ms: float
    unprofiled_ms: float

    @property
    def extra_ms(self) -> float:
        return self.ms - self.unprofiled_ms


@dataclass(frozen=True)
class StepCost:
    """One profiled step: its time, the unprofiled median beside it, and what profiling took of it."""

    step: int
    total_ms: float
    """The step's time by the measure the cost is told in (:attr:`timed_by`)."""
    writing_ms: float
    waits_ms: float
    phases: tuple[PhaseCost, ...] = ()
    """The trainer's phases in this step beside their unprofiled medians, the most grown first (empty
    without phase records on both kinds of step)."""
    unprofiled_ms: float | None = None
    """The median unprofiled step by the same measure; None when no unprofiled step was timed."""
    timed_by: str = RLPROF_TIMING
    """Whose timing the step and the median are: the trainer's own (a phase record's source, e.g. ``verl
    timing_s``) or rlprof's step records (:data:`RLPROF_TIMING`)."""
    opening_ms: float = 0.0
    """Its captures opening, before the step's own start (the step records' ``opened_ns``; a first torch.profiler
    start takes a second on a CPU)."""
    warmup: bool = False
    """One of the run's first :data:`WARMUP_STEPS` steps: its profiling cannot be told apart from its warm-up."""

    @property
    def seen_ms(self) -> float:
        """What rlprof's records name profiling's: captures opening and being written, and waits on them."""
        return self.opening_ms + self.writing_ms + self.waits_ms

    @property
    def beyond_ms(self) -> float | None:
        """The step's time minus the unprofiled median (negative: it was quicker), or None without one."""
        return None if self.unprofiled_ms is None else self.total_ms - self.unprofiled_ms

    @property
    def profiling_ms(self) -> float | None:
        """Profiling's cost to this step: what it took beyond its unprofiled median, never less than what rlprof
        saw it take (:attr:`seen_ms`), which is the figure with no unprofiled step to compare with; None for a
        warm-up step. Told by the trainer's own step (:attr:`timed_by` not rlprof's), the figure is what that step
        took beyond its median: captures written after the trainer's step ended (in the background, while it went
        on) did not lengthen it (verl's CPU example: 1476 ms of writing beside a step 91 ms over its median)."""
        if self.warmup:
            return None
        beyond = self.beyond_ms
        if beyond is not None and self.timed_by != RLPROF_TIMING:
            return max(beyond, 0.0)
        return self.seen_ms if beyond is None else max(beyond, self.seen_ms)

    @property
    def share(self) -> float | None:
        cost = self.profiling_ms
        return None if cost is None else cost / self.total_ms if self.total_ms > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        beyond, cost, share = self.beyond_ms, self.profiling_ms, self.share
        return {**asdict(self), "profiling_ms": None if cost is None else round(cost, 3),
                "share": None if share is None else round(share, 4),
                "seen_ms": round(self.seen_ms, 3), "beyond_ms": None if beyond is None else round(beyond, 3),
                "phases": [{**asdict(p), "extra_ms": round(p.extra_ms, 3)} for p in self.phases]}


@dataclass(frozen=True)
class ProfilingCost:
    steps: list[StepCost]
    unprofiled_ms: float | None
    """The median unprofiled step, by the trainer's own timing where it timed the unprofiled steps (verl's
    ``timing_s/step``), else each step's time taken as a profiled step's is: first start to last end over
    every process that timed it (a Ray controller's whole step, not a replica's generate alone); None when
    none was recorded."""
    unprofiled_count: int
    unprofiled_waits: dict[int, float] = field(default_factory=dict)
    """Waits on profiling paid in a step that was not profiled (a replica still exporting the last
    profiled step's trace when the next ``generate`` came), ms per step: profiling's cost all the same,
    and part of that step's time above."""
    unprofiled_steps_ms: tuple[float, ...] = ()
    """Each unprofiled step's time, as :attr:`unprofiled_ms` takes them: their spread is the noise the
    verdict judges profiling's cost against (:mod:`rlprof.analysis.noise`)."""
    timed_by: str = RLPROF_TIMING
    """Whose timing the unprofiled steps are: the trainer's own where it timed them (a phase record's source,
    as :attr:`StepCost.timed_by`), else rlprof's records (first start to last end over the processes)."""

    @property
    def costly(self) -> list[StepCost]:
        return [s for s in self.steps if (s.share or 0.0) > COST_WARN_SHARE]

    def as_dict(self) -> dict[str, Any]:
        return {"steps": [s.as_dict() for s in self.steps], "unprofiled_ms": self.unprofiled_ms,
                "unprofiled_count": self.unprofiled_count, "unprofiled_waits": self.unprofiled_waits,
                "timed_by": self.timed_by, "warn_share": COST_WARN_SHARE}


def is_wait(kind: Any) -> bool:
    """A record type that names a wait on profiling (``profiling_wait`` and kin)."""
    return isinstance(kind, str) and "profiling_wait" in kind


def profiling_cost(records: Iterable[dict[str, Any]], background: Collection[str] = ()) -> ProfilingCost:
    """The cost of every profiled step from a run's ``step``, ``region``, ``unprofiled_steps`` and wait records.

    ``background``: the manifests of processes that write their captures off the trainer's path (rollout
    replicas export while the actor updates): their regions bound the step by their own time, never by the
    export after it, and that export is no writing of the step; what the trainer waited for it is a wait record.
    """
    window: dict[int, list[int]] = {}
    writing: dict[int, list[tuple[int, int]]] = {}
    opening: dict[int, list[tuple[int, int]]] = {}
    waits: dict[int, float] = {}
    """Per step, waits known only by their length (``duration_ms``), then the union of the timed ones."""
    waited: dict[int, list[tuple[int, int]]] = {}
    plain: dict[Any, list[int]] = {}
    phases: dict[int, dict[str, float]] = {}
    """step -> the trainer's phase -> ms (a phase timed twice in a step: summed)"""
    trainer_step: dict[int, tuple[int, int]] = {}
    trainer_source = RLPROF_TIMING

    def spans(step: int, start: int, end: int) -> None:
        span = window.setdefault(step, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)

    for r in records:
        kind = r.get("type")
        if kind in ("step", "region") and r.get("_manifest") in background:
            if kind == "region":
                spans(r["step"], r["start_ns"], r["end_ns"])
            continue
        if kind in ("step", "region") and (r.get("closed_ns") or 0) > r["end_ns"]:
            writing.setdefault(r["step"], []).append((r["end_ns"], r["closed_ns"]))
        if kind == "step":
            opened = r.get("opened_ns")
            opened = opened if type(opened) is int and opened < r["start_ns"] else r["start_ns"]
            if opened < r["start_ns"]:
                opening.setdefault(r["step"], []).append((opened, r["start_ns"]))
            spans(r["step"], opened, max(r["end_ns"], r.get("closed_ns") or 0))
        elif kind == "unprofiled_steps":
            for step, start, end in zip(r["steps"], r["start_ns"], r["end_ns"]):
                if isinstance(start, int) and isinstance(end, int):
                    span = plain.setdefault(step, [start, end])
                    span[0], span[1] = min(span[0], start), max(span[1], end)
        elif kind == "phase" and isinstance(r.get("step"), int) and isinstance(r.get("start_ns"), int) \
                and isinstance(r.get("end_ns"), int) and isinstance(r.get("name"), str):
            named = phases.setdefault(r["step"], {})
            named[r["name"]] = named.get(r["name"], 0.0) + (r["end_ns"] - r["start_ns"]) / 1e6
            if r["name"] == STEP_PHASE:
                trainer_step[r["step"]] = (r["start_ns"], r["end_ns"])
                trainer_source = str(r.get("source") or "the trainer's timing")
        elif is_wait(kind) and isinstance(r.get("step"), int):
            if isinstance(r.get("start_ns"), int) and isinstance(r.get("end_ns"), int):
                waited.setdefault(r["step"], []).append((r["start_ns"], r["end_ns"]))
            elif isinstance(r.get("duration_ms"), (int, float)):
                waits[r["step"]] = waits.get(r["step"], 0.0) + float(r["duration_ms"])
    for step, intervals in waited.items():  # two replicas waited on at once: the trainer waited once
        waits[step] = waits.get(step, 0.0) + length(union(intervals)) / 1e6
    for step, (start, end) in trainer_step.items():  # the trainer's own time of the step, where it was recorded
        if step in window:
            spans(step, start, end)
        elif step in plain:
            span = plain[step]
            span[0], span[1] = min(span[0], start), max(span[1], end)
    warmup = set(sorted({*window, *plain, *phases})[:WARMUP_STEPS])
    for step in warmup:  # the baseline leaves warm-up out
        plain.pop(step, None)
    usual = _unprofiled_phases({step: named for step, named in phases.items() if step not in warmup},
                               profiled=window.keys())
    plain_ms = [(end - start) / 1e6 for start, end in plain.values()]
    plain_median = round(statistics.median(plain_ms), 3) if plain_ms else None
    steps = []
    for step, (start, end) in sorted(window.items()):
        total, median, timed_by = round((end - start) / 1e6, 3), plain_median, RLPROF_TIMING
        if step in trainer_step and STEP_PHASE in usual:  # the trainer timed this step and unprofiled ones: its measure
            total, median, timed_by = round(phases[step][STEP_PHASE], 3), round(usual[STEP_PHASE], 3), trainer_source
        steps.append(StepCost(step, total, round(length(union(writing.get(step, ()))) / 1e6, 3),
                              round(waits.get(step, 0.0), 3), _beside(phases.get(step, {}), usual), median, timed_by,
                              round(length(union(opening.get(step, ()))) / 1e6, 3), step in warmup))
    paid_unprofiled = {step: round(ms, 3) for step, ms in sorted(waits.items()) if step not in window and ms > 0}
    trainer_plain = [named[STEP_PHASE] for step, named in sorted(phases.items())
                     if step not in window and step not in warmup and STEP_PHASE in named]
    if trainer_plain:  # the steps and their median by the measure the profiled steps are told in
        return ProfilingCost(steps, round(statistics.median(trainer_plain), 3), len(trainer_plain), paid_unprofiled,
                             tuple(round(ms, 3) for ms in trainer_plain), trainer_source)
    return ProfilingCost(steps, plain_median, len(plain_ms), paid_unprofiled, tuple(round(ms, 3) for ms in plain_ms))


def _unprofiled_phases(phases: dict[int, dict[str, float]], profiled: Collection[int]) -> dict[str, float]:
    """Each phase's median ms over the steps that were not profiled."""
    seen: dict[str, list[float]] = {}
    for step, named in phases.items():
        if step not in profiled:
            for name, ms in named.items():
                seen.setdefault(name, []).append(ms)
    return {name: statistics.median(values) for name, values in seen.items()}


def _beside(named: dict[str, float], usual: dict[str, float]) -> tuple[PhaseCost, ...]:
    """A profiled step's phases (its whole step left out) beside their unprofiled medians, most grown first."""
    rows = [PhaseCost(name, round(ms, 3), round(usual[name], 3)) for name, ms in named.items()
            if name != STEP_PHASE and name in usual]
    return tuple(sorted(rows, key=lambda p: -p.extra_ms))
