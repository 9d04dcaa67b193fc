"""The context objects the core hands to backends.

Every hook receives one of these instead of loose arguments, so the spec can grow by adding
fields without breaking a backend (pluggy passes a hookimpl only the arguments it names).
They carry *resolved decisions*: a backend is told "this call opens a capture, write it
here", never the ``ranks``/``steps``/``discrete`` settings those decisions came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping


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
    """Where this capture's files go: ``<run_dir>/<capture>/rank<R>-<host>-<pid>/<backend>/``.
    The core creates it lazily via :meth:`HookContext.output_dir`."""


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
    _artifacts: list | None = field(default=None, repr=False)
    """What add_artifact recorded during this call (created on first use: most calls record nothing)."""

    def output_dir(self) -> Path:
        """The directory to write this capture's files in (created on first call)."""
        if self.capture is None:
            directory = self.run.run_dir / "_process" / f"rank{self.run.rank}-{self.run.host}-{self.run.pid}" / self.backend
        else:
            directory = self.capture.directory / self.backend
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
        return directory

    def add_artifact(self, path: os.PathLike | str, kind: str = "file", **extra: Any) -> None:
        """Record a file or directory this backend produced; the core lists it in the manifest
        with the run, step, role, rank, host and pid of this call. Returning paths from the hook
        does the same. ``extra`` fields are added to the record and may name what the file belongs
        to when that is not this call (``step=``, ``capture=``, ``region=``; a given ``step`` also
        sets ``steps``), e.g. a report relocated at finalize for an earlier capture."""
        if self._artifacts is None:
            self._artifacts = []
        self._artifacts.append((Path(path), kind, extra))


@dataclass(kw_only=True, slots=True)
class StepContext(HookContext):
    """Passed to ``start_step`` and ``step_boundary``."""

    step: int
    """The training step that begins or ends."""
    opens_capture: bool = False
    """start_step: open a capture window now (end-to-end mode, first step of a run of steps)."""
    closes_capture: bool = False
    """step_boundary: close the window opened at start_step (end-to-end, last step of a run)."""
    iteration: int | None = None
    """step_boundary only: set when this is an iteration boundary inside a sampled role region
    (see ``profiler.schedule``) rather than the end of a training step. Backends may mark it or ignore it."""
    region: str | None = None
    """For an iteration boundary: the region the iteration belongs to."""


@dataclass(kw_only=True, slots=True)
class RoleContext(HookContext):
    """Passed to ``start_role`` and ``stop_role``."""

    step: int
    role: str
    """The role, e.g. ``actor``, ``rollout``, ``ref``, ``critic``, ``reward``."""
    region: str
    """The region name to mark: ``<role>_<stage>`` (``actor_update``, ``ref_compute_log_prob``) or the role alone."""
    opens_capture: bool = False
    """start_role: open a capture window for this region (discrete mode)."""
    closes_capture: bool = False
    """stop_role: close the window opened by the matching start_role."""
    iterations: tuple[int, int] | None = None
    """When the role is sampled: the first and last iteration index (inclusive) this call covers."""
    error: BaseException | None = None
    """stop_role only: the exception the region raised, if it did. The core re-raises it afterwards;
    a backend must still close what it opened."""


@dataclass(kw_only=True, slots=True)
class FinalizeContext(HookContext):
    """Passed to ``finalize``."""

    reason: str = "end"
    """Why the run ends: ``end`` (finalize() called), ``exit`` (interpreter exit), ``signal`` (SIGTERM)."""
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
