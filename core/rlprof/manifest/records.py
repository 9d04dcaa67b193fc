
"""The manifest's record types, each declared once (a dataclass per type: its fields typed, defaulted and
documented), and the one decoder that reads a record back (:func:`read_record`, :func:`required`).

A field added to a declaration is written (:func:`record_fields`, ``ManifestWriter.write_record``), read back
and checked by the report (``rlprof.analysis.runs.REQUIRED``) with no other edit.
"""

from __future__ import annotations

import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

FAILURE_RECORD = "worker_failure"
"""Manifest record type the Ray controller writes (``manifest/controller-<host>-<pid>.jsonl``): one per
worker that died or hung past the timeout (it is not waited for again), one per rlprof call that
raised in a worker: worker, rank, call, step, kind, error."""
GATHERED_RECORD = "gathered"
"""One file ``gather: traces`` streamed to the controller (or could not): where from, where to, checksum."""


def short_node(node: str | None) -> str:
    """A Ray node id as logs and reports name it: its first 8 hex digits (as ``ray status`` abbreviates)."""
    return node[:8] if node else "?"



@dataclass(kw_only=True)
class ProcessRecord:
    """The ``process`` record: what one Profiler that will profile is set to do, written when it joins its
    process session (colocated Profilers of one process each write one into the shared file). Read back
    by the report as :class:`rlprof.analysis.runs.Process` (this record, plus where it was read), so a
    field added here is written, read and shown in ``rlprof report --json`` without another edit."""

    TYPE: ClassVar[str] = "process"
    world_size: int | None = None
    """The run's ranks (a replica's process: the replicas)."""
    roles: list[str] = field(default_factory=list)
    """The roles the process hosts, selected or not (readers take the union over a process's records)."""
    selected_roles: list[str] = field(default_factory=list)
    """Those it profiles on this rank."""
    steps: list[int] = field(default_factory=list)
    """The profiled steps (``global_profiler.steps`` as the plan resolved them)."""
    mode: str = "?"
    """``e2e`` or ``discrete``."""
    tools: list[str] = field(default_factory=list)
    """The backends, in ``global_profiler.tool`` order."""
    save_path: str | None = None
    replica_rank: int | None = None
    """The rollout replica it is (agent-loop mode), else None."""
    expected_captures: int | None = None
    """How many capture windows the plan expects each backend to write here; None when it cannot know."""
    schedules: dict[str, dict[str, int]] = field(default_factory=dict)
    """Role -> its sampling schedule (``profiler.schedule``), for the sampled roles."""
    environment: dict[str, list[str]] = field(default_factory=dict)
    """Backend -> what it said it lacks on that machine (``check_environment``): such a backend is expected
    to write nothing."""
    global_profiler: dict[str, Any] = field(default_factory=dict)
    """The ``global_profiler`` keys declared ``recorded`` (:func:`rlprof.config.fields.key`), by their YAML
    names: a key declared so is recorded here, and read back, without another edit."""


@dataclass(kw_only=True)
class CaptureRecord:
    """The ``capture`` record: one per capture as it closes, written with the step's timing records;
    :mod:`rlprof.runtime.budget` counts its bytes against the budgets and the report lists its size."""

    TYPE: ClassVar[str] = "capture"
    capture: str
    """The capture's id (``step3``, ``step3.actor_update``)."""
    step: int | None = None
    steps: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    region: str | None = None
    """The region it was opened for (discrete mode), else None."""
    bytes: int
    """What its artifacts measured as it closed (files written in the background may not be whole yet)."""
    reason: str = "planned"
    """Why it was made: ``planned`` (``global_profiler.steps``, or the caller's own steps), ``requested: <id>``
    (``rlprof capture``, the request's id) or ``triggered: <sentence>`` (a trigger of ``global_profiler.trigger``,
    the sentence saying what fired it: ``triggered: step 812 took 2.3x the median of steps 792-811``)."""


@dataclass(kw_only=True)
class StalenessRecord:
    """The ``staleness`` record: how many parameter versions behind the trainer's weights the samples one step
    of an asynchronous run (verl's fully async policy, ``rlprof demo --async``) trained on were. The trainer
    of step N holds version N - 1, so a sample generated with version w is N - 1 - w behind. Written by the
    driver (``rank`` None) on every step, profiled or not; :mod:`rlprof.analysis.overlap` reads it."""

    TYPE: ClassVar[str] = "staleness"
    step: int
    """The step, which makes parameter version ``step``."""
    samples: int = 0
    min: int | None = None
    mean: float | None = None
    max: int | None = None
    source: str | None = None
    """Who recorded it (``rlprof demo --async``, verl's trainer)."""

    @classmethod
    def of(cls, step: int, behind: list[int], source: str) -> "StalenessRecord":
        """The record of step ``step`` whose samples were ``behind`` versions behind each."""
        return cls(step=step, samples=len(behind), min=min(behind, default=None), max=max(behind, default=None),
                   mean=round(sum(behind) / len(behind), 6) if behind else None, source=source)


STALENESS_RECORD = StalenessRecord.TYPE


@dataclass(kw_only=True)
class FrameworkIdleRecord:
    """The ``framework_idle`` record: an idle figure the training framework logs itself for one parameter
    version of an async run (verl's ``fully_async/rollouter/idle_ratio`` and ``fully_async/trainer/idle_ratio``),
    written by the drop-in where the framework logs it, so that the report sets rlprof's own figure beside it
    (:mod:`rlprof.analysis.overlap`). ``rank`` None (the driver's)."""

    TYPE: ClassVar[str] = "framework_idle"
    step: int
    """The parameter version whose window the figure describes (not the step the framework logged it at)."""
    side: str
    """``rollouter`` (generation) or ``trainer``."""
    idle_ratio: float
    window_s: float | None = None
    """The framework's own window for the ratio (verl: the rollouter's ``version_time``; the trainer's ``timing_s/step``)."""
    metric: str
    """The framework's metric name."""


FRAMEWORK_IDLE_RECORD = FrameworkIdleRecord.TYPE


@dataclass(kw_only=True)
class PhaseRecord:
    """The ``phase`` record: a phase of the training driver's own step, as the driver times it (verl's trainer:
    its ``timing_s/*``, ``gen``, ``reward``, ``adv``, ``update_actor``...). Written by the driver
    (``manifest/driver-<host>-<pid>.jsonl``, ``rank`` None) for profiled steps only; the report names what
    "(outside regions)" holds with them."""

    TYPE: ClassVar[str] = "phase"
    step: int
    name: str
    source: str | None = None
    """Who timed it (``verl``)."""
    start_ns: int
    end_ns: int
    duration_ms: float | None = None


PHASE_RECORD = PhaseRecord.TYPE


@dataclass(kw_only=True)
class UnprofiledStepsRecord:
    """The ``unprofiled_steps`` record: steps a profiling process ran without profiling them (not selected, or
    left out by a budget), many per record, one item of each list per step. The report puts profiled steps
    beside them. A Ray controller writes them too (``rank`` None), timed from its ``start_step`` to its
    ``step_boundary``: its workers hear nothing of an unprofiled step."""

    TYPE: ClassVar[str] = "unprofiled_steps"
    steps: list[int]
    start_ns: list[int]
    end_ns: list[int]


@dataclass(kw_only=True)
class NodeRecord:
    """The ``node`` record: the first line of a manifest the Ray controller gathered from another node
    (:mod:`rlprof.integrations.nodes`)."""

    TYPE: ClassVar[str] = "node"
    node: str | None = None
    """The Ray node id."""
    node_run_dir: str
    """The worker's run directory on that node: the file's artifact paths are relative to it."""
    node_manifest: str | None = None


NODE_RECORD = NodeRecord.TYPE


@dataclass(kw_only=True)
class NodeLostRecord:
    """The ``node_lost`` record: the controller found a node dead."""

    TYPE: ClassVar[str] = "node_lost"
    node: str
    node_host: str | None = None
    workers: list[str] = field(default_factory=list)
    """The workers it held (their names)."""
    step: int | None = None
    """The last profiled step it completed."""


NODE_LOST_RECORD = NodeLostRecord.TYPE


Record = TypeVar("Record")


def record_fields(record: Any) -> dict[str, Any]:
    """A typed record's fields, as its manifest line holds them (``ManifestWriter.write(record.TYPE, **...)``)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def read_record(cls: type[Record], raw: dict[str, Any], **given: Any) -> Record:
    """``cls`` read from the manifest record ``raw``: each field from ``raw`` where it holds a value of the
    field's declared type (lists and mappings copied), else the field's default (a record written by an
    older rlprof, or edited by hand, never breaks a reader); ``given`` fields are set as given (what the
    reader knows besides the record, such as the file it came from).

    :raises ValueError: a field without a default is missing or of another type (see :func:`required`:
        readers check those first)."""
    hints = _hints(cls)
    values = {}
    for f in fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        value = raw.get(f.name, MISSING)
        if value is not MISSING and _fits(hints[f.name], value):
            values[f.name] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"{cls.__name__}.{f.name}: got {value!r}; allowed: {hints[f.name]}")
    return cls(**values)


def required(cls: type) -> dict[str, type]:
    """The fields of a record type that have no default (a record without them is not used), with their types
    (a container's kind: ``list`` for ``list[int]``)."""
    hints = _hints(cls)
    return {f.name: typing.get_origin(hints[f.name]) or hints[f.name] for f in fields(cls)
            if f.default is MISSING and f.default_factory is MISSING}


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fits(hint: Any, value: Any) -> bool:
    """``value`` is of the type ``hint`` (containers by their kind, not their items; ``bool`` is no ``int``)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(option, value) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin)
    if hint is float:
        return type(value) in (int, float)
    return type(value) is hint


