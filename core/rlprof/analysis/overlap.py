"""Async overlap: per parameter version, who waited for whom while rollout and training overlapped.

Use it on a run where rollout and training overlap (verl's fully async policy, ``rlprof demo --async``):
there a step is a parameter version (the trainer's step N makes version N; a rollout replica's step N
runs between the weight syncs that end the trainer's steps N - 1 and N), and the slow part is whichever
side waited. The figures come from the processes' own ``region`` records, in the region vocabulary the
drivers share (:data:`TRAINER_REGIONS`, :data:`REPLICA_REGIONS`), and from the driver's ``staleness``
records. A run without these regions has no overlap table (None): synchronous runs are unchanged.

Definitions (docs/analysis.md, "Async overlap", has a worked example):

* A version's **window** is the span of its ``step`` records: from the first start to the last end over
  every process (trainer ranks and replicas); without step records, of its regions.
* Each figure is the **union** of a process's intervals of some regions, **clipped to the window**
  (a trainer rank's over its processes: verl's fully async trainer waits in its driver's process)
  (time counted once, never a sum of durations): ``wait`` (``actor_wait_samples``), ``update``
  (``actor_update``), ``send`` (``actor_weight_send``) for a trainer rank, the median over the trainer
  ranks; ``generating`` (``rollout_generate``), ``paused`` (``rollout_weight_pause``, abort to resume),
  ``held`` (``rollout_held``) for a replica, and ``other``: the window less the union of those three. A
  ``rollout_held`` recorded by a process that is neither a trainer rank nor a replica (the generation
  driver, verl's rollouter) holds every replica: it counts in each replica's ``held``.
* The **weight sync split**, per replica: ``load`` (``rollout_weight_load``), ``resume``
  (``rollout_resume``) and ``transport``, derived: the part of its pause covered by neither (the weights
  on their way to it); on the trainer's side ``send`` (gathering and sending) and, derived,
  ``send_beyond_pause``: the part of the send no replica spent paused (gathering, the call on its way
  to the replicas, their answers on the way back); and ``sync``: the version's weight sync end to end,
  from the first ``actor_weight_send`` or ``rollout_weight_pause`` start to the last end of either,
  inside the window.
* ``between_steps``, per replica: the window outside the replica's own ``step`` records (rlprof's work
  at its step boundary: a capture stopping, the next starting), part of ``other``.
* **Overlap**: how much of the trainer's ``actor_update`` (every rank's, united) some replica spent
  generating (every replica's ``rollout_generate``, united): the two sides' union intersected.
* **Staleness**: the driver's ``staleness`` record of the version (versions behind the trainer's
  weights of the samples it trained on: min, mean, max).

Until every step's regions are recorded, only profiled versions have region records: the others are
listed as missing (``missing``), with the reason (:data:`MISSING_NOTE`).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

from rlprof.analysis.anatomy import process_name, replica_ranks, timing_record
from rlprof.intervals import Union, clip, difference, intersection, length, union
from rlprof.manifest import (FRAMEWORK_IDLE_RECORD, STALENESS_RECORD, FrameworkIdleRecord, StalenessRecord, read_record,
                             record_fields, required)

WAIT, UPDATE, SEND = "actor_wait_samples", "actor_update", "actor_weight_send"
GENERATE, PAUSE, LOAD, RESUME, HELD = ("rollout_generate", "rollout_weight_pause", "rollout_weight_load",
                                       "rollout_resume", "rollout_held")
TRAINER_REGIONS = (WAIT, UPDATE, SEND)
"""The trainer's regions of an async step: waiting on the sample queue, training, gathering and sending weights."""
REPLICA_REGIONS = (GENERATE, PAUSE, LOAD, RESUME, HELD)
"""A replica's (and the generation driver's ``rollout_held``) regions of an async step."""
ASYNC_REGIONS = frozenset((WAIT, SEND, PAUSE, HELD))
"""Regions only an async run records: a run with any of them gets the overlap table."""
MISSING_NOTE = ("regions are recorded on profiled versions only (until rlprof times every step's regions); "
                "the staleness of every version is recorded")


@dataclass
class ReplicaVersion:
    """One replica's time in one version's window (ms; unions, clipped to the window)."""

    replica_rank: int
    generating_ms: float
    paused_ms: float
    held_ms: float
    other_ms: float
    """The window less the union of generating, paused and held."""
    between_steps_ms: float
    """The part of the window outside the replica's own steps (its ``step`` records): rlprof's work at its
    step boundary, a capture stopping and the next one starting. Part of ``other_ms``."""
    transport_ms: float
    """Its pause covered by neither load nor resume: the weights on their way (derived)."""
    load_ms: float
    resume_ms: float

    @property
    def name(self) -> str:
        return process_name(0, self.replica_rank)


@dataclass
class TrainerVersion:
    """The trainer ranks in one version's window: the median over ranks, and each rank's (ms)."""

    wait_ms: float
    update_ms: float
    send_ms: float
    send_beyond_pause_ms: float
    """The send no replica spent paused: gathering, the call on its way to each replica, the answers back."""
    ranks: dict[int, dict[str, float]] = field(default_factory=dict)
    """rank -> ``{"wait_ms", "update_ms", "send_ms", "send_beyond_pause_ms"}``."""


@dataclass
class VersionOverlap:
    step: int
    """The parameter version (the trainer's step that makes it)."""
    start_ns: int
    end_ns: int
    trainer: TrainerVersion | None
    replicas: list[ReplicaVersion]
    overlap_ms: float
    """The trainer's update time during which some replica generated."""
    overlap_share: float | None
    """``overlap_ms`` over the trainer's update time (its ranks' union); None without an update."""
    sync_ns: tuple[int, int] | None
    """The weight sync end to end: the first send or pause start, the last end of either (None without either)."""
    staleness: dict[str, Any] | None = None
    """The driver's ``staleness`` record: ``samples``, ``min``, ``mean``, ``max``, ``source``."""
    framework_idle: list[dict[str, Any]] = field(default_factory=list)
    """The framework's own idle figures of this version (``framework_idle`` records: verl's ``idle_ratio``), each
    beside rlprof's (:func:`beside_framework`): ``side``, ``metric``, ``idle_ratio``, ``window_s``, ``rlprof_ratio``,
    ``difference`` (rlprof's less the framework's, a share of the version)."""

    @property
    def window_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def sync_ms(self) -> float | None:
        return None if self.sync_ns is None else _ms(self.sync_ns[1] - self.sync_ns[0])

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["window_ms"] = _r(self.window_ms)
        out["sync_ms"] = self.sync_ms
        for replica, entry in zip(self.replicas, out["replicas"]):
            entry["name"] = replica.name
        return out


@dataclass
class Overlap:
    """The per-version overlap table of one run."""

    versions: list[VersionOverlap]
    missing: list[int]
    """Versions the run went through (a ``staleness`` or unprofiled-step record says so) without region records."""

    def as_dict(self) -> dict[str, Any]:
        return {"versions": [v.as_dict() for v in self.versions], "missing_versions": self.missing,
                "missing_note": MISSING_NOTE if self.missing else None}


def is_async(records: Iterable[dict[str, Any]]) -> bool:
    """Whether a run's records hold any region only async runs record (:data:`ASYNC_REGIONS`)."""
    return any(r.get("type") == "region" and r.get("region") in ASYNC_REGIONS for r in records)


def overlap_of(records: Sequence[dict[str, Any]]) -> Overlap | None:
    """The overlap table of one run from its records (``process``, ``step``, ``region``, ``staleness``,
    ``unprofiled_steps``; others are ignored, as are timing records missing a field), or None when
    the run recorded none of :data:`ASYNC_REGIONS`."""
    timed = [r for r in records if timing_record(r)]
    if not any(r["type"] == "region" and r["region"] in ASYNC_REGIONS for r in timed):
        return None
    replicas = replica_ranks(records)
    trainer_keys = {_key(r) for r in timed if r["type"] == "region" and r["region"] in TRAINER_REGIONS}
    trainer_keys |= {_key(r) for r in records if r.get("type") == "process" and "actor" in (r.get("roles") or ())
                     and type(r.get("rank")) is int}
    trainer_keys -= set(replicas)
    windows: dict[int, list[int]] = {}
    steps: dict[tuple, list[tuple[int, int]]] = {}
    """process key -> its step records' intervals (every step: a version's window may hold the end of the last)"""
    regions: dict[int, dict[tuple, dict[str, list[tuple[int, int]]]]] = {}
    """step -> process key -> region -> intervals (a process with a step record and no region: none)"""
    for r in timed:
        if r["type"] == "step":
            _widen(windows, r["step"], r["start_ns"], r["end_ns"])
            steps.setdefault(_key(r), []).append((r["start_ns"], r["end_ns"]))
            regions.setdefault(r["step"], {}).setdefault(_key(r), {})
    for r in timed:
        if r["type"] == "region" and r["region"] in TRAINER_REGIONS + REPLICA_REGIONS:
            regions.setdefault(r["step"], {}).setdefault(_key(r), {}).setdefault(r["region"], []).append(
                (r["start_ns"], r["end_ns"]))
    timed_steps = {r["step"] for r in timed if r["type"] == "region" and r["region"] in TRAINER_REGIONS + REPLICA_REGIONS}
    regions = {step: by_process for step, by_process in regions.items() if step in timed_steps}
    for step, by_process in regions.items():
        if step not in windows:  # no step record: the span of its regions
            spans = [i for per_region in by_process.values() for ivs in per_region.values() for i in ivs]
            windows[step] = [min(s for s, _ in spans), max(e for _, e in spans)]
    needed = required(StalenessRecord)
    staleness = {r["step"]: read_record(StalenessRecord, r) for r in records if r.get("type") == STALENESS_RECORD
                 and all(type(r.get(k)) is t for k, t in needed.items())}
    versions = [_version(step, windows[step], regions[step], trainer_keys, replicas, staleness.get(step), steps)
                for step in sorted(regions)]
    needed = required(FrameworkIdleRecord)
    idle = [read_record(FrameworkIdleRecord, r) for r in records if r.get("type") == FRAMEWORK_IDLE_RECORD
            and all(type(r.get(k)) is t for k, t in needed.items())]
    for version in versions:
        version.framework_idle = [beside_framework(version, r) for r in idle if r.step == version.step]
    went = set(staleness) | {s for r in records if r.get("type") == "unprofiled_steps" and isinstance(r.get("steps"), list)
                             for s in r["steps"] if type(s) is int}
    return Overlap(versions, sorted(went - set(regions)))


def _version(step: int, window: list[int], by_process: dict[tuple, dict[str, list[tuple[int, int]]]],
             trainer_keys: set[tuple], replicas: dict[tuple, int], staleness: StalenessRecord | None,
             steps: dict[tuple, list[tuple[int, int]]]) -> VersionOverlap:
    start, end = window

    def part(intervals: Iterable[tuple[int, int]]) -> Union:
        return clip(union(intervals), start, end)

    drivers_held = part(i for key, per in by_process.items() if key not in replicas and key not in trainer_keys
                        for i in per.get(HELD, ()))
    pauses = union(i for key, per in by_process.items() if key in replicas for i in part(per.get(PAUSE, ())))
    ranks: dict[int, dict[str, float]] = {}
    updates: list[tuple[int, int]] = []
    syncing: list[tuple[int, int]] = list(pauses)
    by_rank: dict[int, dict[str, list[tuple[int, int]]]] = {}
    """A trainer rank's regions over its processes: verl's fully async trainer waits in its driver's process
    (the ``FullyAsyncTrainer`` actor, rank 0) and updates and sends in its worker's."""
    for key in (k for k in by_process if k in trainer_keys):
        per_rank = by_rank.setdefault(key[0], {})
        for region, intervals in by_process[key].items():
            per_rank.setdefault(region, []).extend(intervals)
    for rank in sorted(by_rank):
        per = by_rank[rank]
        update = part(per.get(UPDATE, ()))
        send = part(per.get(SEND, ()))
        updates += update
        syncing += send
        ranks[rank] = {"wait_ms": _ms(length(part(per.get(WAIT, ())))), "update_ms": _ms(length(update)),
                         "send_ms": _ms(length(send)), "send_beyond_pause_ms": _ms(length(difference(send, pauses)))}
    generated: list[tuple[int, int]] = []
    sides: list[ReplicaVersion] = []
    for key in sorted((k for k in by_process if k in replicas), key=lambda k: (replicas[k], k)):
        per = by_process[key]
        generating, paused = part(per.get(GENERATE, ())), part(per.get(PAUSE, ()))
        held = union(part(per.get(HELD, ())) + drivers_held)
        load, resume = part(per.get(LOAD, ())), part(per.get(RESUME, ()))
        busy = union(generating + paused + held)
        generated += generating
        sides.append(ReplicaVersion(
            replica_rank=replicas[key], generating_ms=_ms(length(generating)), paused_ms=_ms(length(paused)),
            held_ms=_ms(length(held)), other_ms=_ms((end - start) - length(busy)),
            between_steps_ms=_ms((end - start) - length(part(steps.get(key, ())))) if key in steps else 0.0,
            transport_ms=_ms(length(difference(paused, union(load + resume)))), load_ms=_ms(length(load)),
            resume_ms=_ms(length(resume))))
    trainer = None
    if ranks:
        trainer = TrainerVersion(*(statistics.median(r[k] for r in ranks.values())
                                   for k in ("wait_ms", "update_ms", "send_ms", "send_beyond_pause_ms")), ranks=ranks)
    updating = union(updates)
    overlap = length(intersection(updating, union(generated)))
    sync = union(syncing)
    return VersionOverlap(step, start, end, trainer, sides, _ms(overlap),
                          round(overlap / length(updating), 6) if updating else None,
                          (sync[0][0], sync[-1][1]) if sync else None,
                          None if staleness is None else {k: v for k, v in record_fields(staleness).items() if k != "step"})


def beside_framework(version: VersionOverlap, record: FrameworkIdleRecord) -> dict[str, Any]:
    """A framework's idle figure of ``version`` beside rlprof's own for the same side (docs/analysis.md,
    "Async overlap": why they differ): the trainer's ``waited`` share of the window, or a replica's share of
    its own steps in the window not generating (the median over replicas; a replica's steps run sync to
    sync, as verl's rollouter window does). ``rlprof_ratio`` None where rlprof has no figure."""
    window = version.window_ms
    ours = None
    if record.side == "trainer" and version.trainer is not None and window:
        ours = version.trainer.wait_ms / window
    elif record.side == "rollouter":
        own = [(window - r.between_steps_ms, r.generating_ms) for r in version.replicas]
        own = [(span, generating) for span, generating in own if span > 0]
        ours = statistics.median(1 - generating / span for span, generating in own) if own else None
    return {**record_fields(record), "rlprof_ratio": None if ours is None else round(ours, 6),
            "difference": None if ours is None else round(ours - record.idle_ratio, 6)}


def _widen(windows: dict[int, list[int]], step: int, start: int, end: int) -> None:
    window = windows.setdefault(step, [start, end])
    window[0], window[1] = min(window[0], start), max(window[1], end)


def _key(record: dict[str, Any]) -> tuple[int, str, int]:
    return (record["rank"], record.get("host", "?"), record.get("pid", 0))


def _ms(ns: float) -> float:
    return round(ns / 1e6, 6)


def _r(value: float) -> float:
    return round(value, 3)
