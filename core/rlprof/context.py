"""The context objects the core hands to backends.

Every hook receives one of these instead of loose arguments, so the spec can grow by adding
fields without breaking a backend (pluggy passes a hookimpl only the arguments it names).
They carry *resolved decisions*: a backend is told "this call opens a capture, write it
here", never the ``ranks``/``steps``/``discrete`` settings those decisions came from.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rlprof import notices

@dataclass(frozen=True)
class RunInfo:
    """Who and where this process is; the same object for every hook call of a Profiler."""

    run_id: str
    """Identifies one training run; shared by every rank of the run (the Ray controller hands it out)."""
    rank: int
    """This process's global rank (what ``ranks`` of training roles count)."""
    world_size: int
    host: str
    pid: int
    run_dir: Path
    """``<save_path>/<run_id>``: the root of everything this run writes."""
    roles: tuple[str, ...]
    """The roles this process hosts (selected or not), e.g. ``("actor", "ref")``."""
    replica_rank: int | None = None
    """Rollout replica index in agent-loop mode (what ``rollout.profiler.ranks`` counts), else None."""
    peak_tflops: float | None = None
    """``global_profiler.peak_tflops`` (None: not configured): ask :meth:`peak` rather than read it."""

    def peak(self, device: str, dtype: str | None = None, measure: bool = True) -> Any:
        """The :class:`rlprof.peak.Peak` this process's FLOP figures on ``device`` (``cpu``, ``cuda:0``) are divided
        by: the configured one, the device's spec or the calibration, which is measured once per run and host
        (:func:`rlprof.peak.run_peak`: a fraction of a second, the first time any process of the host asks)."""
        from rlprof.peak import run_peak

        return run_peak(self.run_dir, self.host, device, dtype, self.peak_tflops, measure=measure)


@dataclass(frozen=True)
class Capture:
    """One capture window: what a backend opens and closes (a trace file, an nsys range...)."""

    capture_id: str
    """Unique within the run and process, e.g. ``step3``, ``step1-2`` or ``step3.actor_update``."""
    steps: tuple[int, ...]
    """The training steps the window covers (several when ``profile_continuous_steps`` merged them)."""
    regions: tuple[str, ...]
    """Region names the window is for (discrete: one; end-to-end: empty until known)."""
    directory: Path
    """The capture's process directory, ``<run_dir>/<capture>/rank<R>-<host>-<pid>/``, shared by every
    backend of the process. A backend's own files go one level down, in ``<directory>/<backend>/``:
    that is what :meth:`HookContext.output_dir` returns (and creates on first call)."""


REMOVED_ATTRIBUTES: dict[tuple[str, str], tuple[str, int]] = {
    ("StepContext", "iteration"): ("the iteration_boundary hook (its IterationContext.iteration)", 1),
}
"""``(context class, attribute) -> (what replaced it, the hook contract that removed it)``
(:data:`rlprof.hookspecs.CONTRACT`): reading one raises an ``AttributeError`` that says so."""

_log = logging.getLogger("rlprof")

RESERVED_FIELDS = frozenset({"type", "run", "rank", "host", "pid", "time", "backend", "path", "size",
                             "world_size", "mode", "outside_output_dir"})
"""Manifest fields of an artifact record that only the core fills (see :meth:`HookContext.add_artifact`)."""


def context_field(ctx: Any, name: str) -> Any:
    """``ctx.<name>`` when the context's class has that field, else None: ``getattr(ctx, name, None)``
    without the ``AttributeError`` that :meth:`HookContext.__getattr__` builds for a missing name (the
    core asks every artifact's context for its step, role, region and iterations)."""
    fields = getattr(type(ctx), "__dataclass_fields__", None)
    if fields is None:
        return getattr(ctx, name, None)
    return getattr(ctx, name) if name in fields else None


@dataclass(kw_only=True, slots=True)
class HookContext:
    """Base of every context: the run, the backend's own validated config, and an artifact sink."""

    run: RunInfo
    backend: str
    """The name this backend was selected under (``global_profiler.tool``)."""
    tool_config: Mapping[str, Any]
    """This backend's validated ``tool_config`` (global_tool_config merged under the role's section,
    core-owned keys such as ``discrete`` and ``schedule`` removed)."""
    capture: Capture | None
    """The capture window this call belongs to, or None (e.g. finalize, a range outside any capture)."""
    ends_group: tuple[int, ...] = ()
    """Set on the calls that close a capture (``closes_capture``) and on ``finalize``: the step numbers
    of the group of captures this call completes, meaning "write what covers these steps now". Empty:
    no group ends here (keep what you collect). Without ``memory_snapshot_num_steps`` in a backend's
    validated tool_config every close completes its own group (the capture's steps) and finalize gets
    ``()``; with ``memory_snapshot_num_steps: N`` the core groups closed captures until they cover N
    step numbers, and finalize ends the group left over. The grouping is the core's, never the backend's."""
    _artifacts: list | None = field(default=None, repr=False)
    """What add_artifact recorded during this call (created on first use: most calls record nothing)."""
    _notes: list | None = field(default=None, repr=False)
    """What warn and skip said during this call, as ``(record type, text)`` (created on first use)."""

    def __getattr__(self, name: str) -> Any:
        """Only reached for a name the context does not have: one a later contract removed says what
        replaced it (:data:`REMOVED_ATTRIBUTES`), anything else is a plain AttributeError."""
        for cls in type(self).__mro__:
            removed = REMOVED_ATTRIBUTES.get((cls.__name__, name))
            if removed is not None:
                raise AttributeError(
                    f"'{cls.__name__}' object has no attribute {name!r}: it was removed in rlprof hook contract "
                    f"{removed[1]}, use {removed[0]} instead (docs/migration.md); declare rlprof_contract = "
                    f"{removed[1]} once the backend is moved")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def output_dir(self) -> Path:
        """The directory to write this capture's files in (created on first call, never through a
        symbolic link planted under the run directory)."""
        if self.capture is None:
            directory = self.run.run_dir / "_process" / f"rank{self.run.rank}-{self.run.host}-{self.run.pid}" / self.backend
        else:
            directory = self.capture.directory / self.backend
        from rlprof.layout import ensure_dir

        ensure_dir(directory, self.run.run_dir)  # a directory made or walked to a moment ago costs a stat and a dup
        return directory

    def add_artifact(self, path: os.PathLike | str, kind: str = "file", **extra: Any) -> None:
        """Record a file or directory this backend produced; the core lists it in the manifest
        with the run, step, role, rank, host and pid of this call. Returning paths from the hook
        does the same. ``extra`` fields are added to the record and may name what the file belongs
        to when that is not this call (``step=``, ``capture=``, ``region=``; a given ``step`` also
        sets ``steps``), e.g. a report relocated at finalize for an earlier capture. The fields the
        core fills itself (:data:`RESERVED_FIELDS`: rank, run, type, path...) are refused with a
        ``ValueError``: a backend cannot make its file look like another rank's or like an error."""
        reserved = RESERVED_FIELDS.intersection(extra)
        if reserved:
            raise ValueError(f"ctx.add_artifact: {', '.join(sorted(reserved))} are filled by rlprof's core and cannot be "
                             f"given; allowed extra fields: anything else, e.g. step=, capture=, region=")
        if self._artifacts is None:
            self._artifacts = []
        self._artifacts.append((Path(path), kind, extra))

    def added_artifacts(self) -> tuple[tuple[Path, str, dict[str, Any]], ...]:
        """What :meth:`add_artifact` recorded during this call, in order, as ``(path, kind, extra
        fields)``: for code that calls a hook itself (the testing kit's second finalize) and must see
        what the backend added besides what it returned. The core reads the same record."""
        return tuple(self._artifacts or ())

    def warn(self, message: str) -> None:
        """Tell the user something about this backend's capture (a tool that fell back, an option it
        ignored). Logged once per process on the ``rlprof`` logger (the worker's log) and recorded as
        a ``warning`` record (kind ``backend``) with this call's step, capture and region, which
        ``rlprof report`` and the verdict show. It never fails the run."""
        message = str(message).strip()
        notices.say_once(f"{self.backend}: ctx.warn: {message}", _log, "rlprof: backend %r on rank %d: %s",
                         self.backend, self.run.rank, message)
        self._note("warning", message)

    def skip(self, reason: str) -> None:
        """Say that this call's capture (``ctx.capture``) writes nothing, and why (the tool is not
        installed, it failed to start). Recorded as a ``skip`` record: the verdict and the report show
        the reason beside the capture, and a capture skipped with a reason counts as explained, not
        missing. Call it from any hook of that capture (e.g. at its open, or at its close)."""
        reason = str(reason).strip()
        notices.say_once(f"{self.backend}: ctx.skip: {reason}", _log, "rlprof: backend %r on rank %d skipped capture %s: %s",
                         self.backend, self.run.rank, self.capture.capture_id if self.capture is not None else "(none)",
                         reason)
        self._note("skip", reason)

    def _note(self, record_type: str, text: str) -> None:
        if self._notes is None:
            self._notes = []
        self._notes.append((record_type, text))


@dataclass(kw_only=True, slots=True)
class StepContext(HookContext):
    """Passed to ``start_step`` and ``step_boundary``."""

    step: int
    """The training step that begins or ends."""
    opens_capture: bool = False
    """start_step: open a capture window now (end-to-end mode: the first step of a run of steps seen)."""
    closes_capture: bool = False
    """step_boundary: close the window opened at start_step (end-to-end: the last step of a run, or
    the run was left early)."""
    ends_step: bool = True
    """step_boundary: False only when the call closes a merged run's window *after* its last step
    already ended (training skipped ahead, or stopped before the run's last step): then ``step`` is
    the last step seen, it was already ended by its own step_boundary, and only the window closes."""


@dataclass(kw_only=True, slots=True)
class IterationContext(HookContext):
    """Passed to ``iteration_boundary``: an iteration ended inside an open window of a sampled region."""

    step: int
    role: str
    """The role of the sampled region."""
    region: str
    """The sampled region, e.g. ``actor_update``."""
    iteration: int
    """The index (0-based, counted inside the region) of the iteration that just ended; the next one
    belongs to the same window."""


@dataclass(kw_only=True, slots=True)
class RoleContext(HookContext):
    """Passed to ``start_role`` and ``stop_role``."""

    step: int
    role: str
    """The role, e.g. ``actor``, ``rollout``, ``ref``, ``critic``, ``reward``."""
    region: str
    """The region name to mark: ``<role>_<stage>`` (``actor_update``, ``ref_compute_log_prob``) or the role alone."""
    opens_capture: bool = False
    """start_role: open a capture window for this region (discrete mode, and no capture open: a region
    entered inside an open capture is a named range in it)."""
    closes_capture: bool = False
    """stop_role: close the window opened by the matching start_role."""
    iterations: tuple[int, int] | None = None
    """When the role is sampled: the first and last iteration index (inclusive) this call covers."""
    error: BaseException | None = None
    """stop_role only: the exception the region raised, if it did. The core re-raises it afterwards;
    a backend must still close what it opened."""
    module: Any = None
    """The model the region runs, when the trainer named one (``prof.role("actor", "update",
    module=model)``; the verl drop-in passes the module verl's worker holds for the role), else None.
    For backends that hook into the model (``precision_debugger``); the same object at start and stop.
    Added within contract 1: a backend that needs it must handle None (say so with ``ctx.skip``)."""


@dataclass(kw_only=True, slots=True)
class FinalizeContext(HookContext):
    """Passed to ``finalize``."""

    reason: str = "end"
    """Why the run ends: ``end`` (finalize() called), ``exit`` (interpreter exit), ``signal`` (SIGTERM),
    or ``released``: this backend raised earlier, and the core, having closed what it had open, lets it
    release its threads, profilers and files now (the run goes on without it)."""
    profiled_steps: tuple[int, ...] = ()
    """The steps that were actually profiled in this process."""
    relocate_results: bool = False
    """``relocate_results`` from the config: move files the tool wrote to framework-fixed places
    (e.g. Ray's nsight log directory) into this run's layout."""


@dataclass(frozen=True)
class RuntimeEnvContext:
    """Passed to ``worker_runtime_env`` on the Ray controller, before a worker actor exists."""

    backend: str
    tool_config: Mapping[str, Any]
    """The backend's validated config for the worker's first selected role (global_tool_config merged)."""
    rank: int
    world_size: int
    roles: tuple[str, ...]
    captures: bool
    """Whether this worker will open any capture window at all under the plan."""
    expected_captures: int | None
    """Exactly how many capture windows the worker will open, or None when the plan cannot know
    (discrete mode without declared stages, an unbounded sampling schedule)."""


# --------------------------------------------------------------------------- the core's constructors
#
# The one place each context class is built by the core (the registry's hook calls, the testing kit).
# A class's own fields are keyword-only, so a field added to a class cannot silently take another's
# value; the five fields of :class:`HookContext` come first, positional-only, in the order of
# :func:`_base` (a new base field changes every constructor's signature: a call that misses it fails
# loudly). The core builds a context for every backend on every hook call, two per profiled region;
# calling the dataclass itself with a dozen keywords goes through CPython's slow keyword-matching path
# for classes (about 6x the cost, bench/bench_core.py), while a plain function called with keywords
# costs what a positional call does. Backends never need these.

_new = object.__new__


def _base(cls: type, run: RunInfo, backend: str, tool_config: Mapping[str, Any], capture: Capture | None,
          ends_group: tuple[int, ...]) -> Any:
    """A ``cls`` with :class:`HookContext`'s fields set (a new base field is one edit, here)."""
    ctx = _new(cls)
    ctx.run, ctx.backend, ctx.tool_config, ctx.capture, ctx.ends_group, ctx._artifacts, ctx._notes = (
        run, backend, tool_config, capture, ends_group, None, None)
    return ctx


def step_context(run: RunInfo, backend: str, tool_config: Mapping[str, Any], capture: Capture | None,
                 ends_group: tuple[int, ...], /, *, step: int, opens_capture: bool, closes_capture: bool,
                 ends_step: bool) -> StepContext:
    ctx = _base(StepContext, run, backend, tool_config, capture, ends_group)
    ctx.step, ctx.opens_capture, ctx.closes_capture, ctx.ends_step = step, opens_capture, closes_capture, ends_step
    return ctx


def role_context(run: RunInfo, backend: str, tool_config: Mapping[str, Any], capture: Capture | None,
                 ends_group: tuple[int, ...], /, *, step: int, role: str, region: str, opens_capture: bool,
                 closes_capture: bool, iterations: tuple[int, int] | None, error: BaseException | None,
                 module: Any) -> RoleContext:
    ctx = _base(RoleContext, run, backend, tool_config, capture, ends_group)
    ctx.step, ctx.role, ctx.region, ctx.opens_capture, ctx.closes_capture = step, role, region, opens_capture, closes_capture
    ctx.iterations, ctx.error, ctx.module = iterations, error, module
    return ctx


def iteration_context(run: RunInfo, backend: str, tool_config: Mapping[str, Any], capture: Capture | None,
                      ends_group: tuple[int, ...], /, *, step: int, role: str, region: str,
                      iteration: int) -> IterationContext:
    ctx = _base(IterationContext, run, backend, tool_config, capture, ends_group)
    ctx.step, ctx.role, ctx.region, ctx.iteration = step, role, region, iteration
    return ctx


def finalize_context(run: RunInfo, backend: str, tool_config: Mapping[str, Any], capture: Capture | None,
                     ends_group: tuple[int, ...], /, *, reason: str, profiled_steps: tuple[int, ...],
                     relocate_results: bool) -> FinalizeContext:
    ctx = _base(FinalizeContext, run, backend, tool_config, capture, ends_group)
    ctx.reason, ctx.profiled_steps, ctx.relocate_results = reason, profiled_steps, relocate_results
    return ctx


def build(cls: type, run: RunInfo, backend: str, tool_config: Mapping[str, Any], capture: Capture | None,
          ends_group: tuple[int, ...], /, **fields: Any) -> Any:
    """A context of any :class:`HookContext` class, taking what the constructors above take: for a hook
    off the hot path (:meth:`rlprof.runtime.registry.Backends.call`), whose class needs no constructor of
    its own (the dataclass's, called with keywords: slower, and a missing field fails as loudly)."""
    return cls(run=run, backend=backend, tool_config=tool_config, capture=capture, ends_group=ends_group, **fields)


CONSTRUCTORS = {StepContext: step_context, RoleContext: role_context, IterationContext: iteration_context,
                FinalizeContext: finalize_context}
"""Each lifecycle context class -> its one constructor (tests/runtime/test_registry.py checks each
takes exactly its class's fields)."""
