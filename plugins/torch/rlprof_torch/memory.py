"""The ``torch_memory`` backend: a CUDA caching-allocator snapshot (``.pickle``) per capture window.

History recording (``torch.cuda.memory._record_memory_history``) starts when the first capture
opens and stays on until ``finalize``. With ``clear_history`` (the default) each later window
clears the history as it opens, so every snapshot holds the alloc/free events of its own window
plus the state of every live block. ``memory_snapshot_num_steps: N`` (verl's key) keeps the
history across windows until the core says a group of them ends (``ctx.ends_group``: the core groups
windows until they cover N training step numbers, :mod:`rlprof.runtime.groups`), then writes one
snapshot for all of them. Each snapshot is ``rank<R>.memory_snapshot.pickle`` in the directory of the window that
ends it (``rank<R>.1.memory_snapshot.pickle`` when another Profiler of the run and rank in this process wrote
one there: :func:`rlprof.layout.reserve`; open it at https://pytorch.org/memory_viz or with
``python -m torch.cuda._memory_viz trace_plot``). While a role region runs, its name is attached
to every allocation (``_set_memory_metadata``), so the viewer says which role allocated what.
With ``dump_on_oom`` (default, as in verl) a CUDA out-of-memory error writes
``oom.memory_snapshot.pickle`` under the process's ``_process/`` directory first (:mod:`rlprof_torch.oom`).

The section's keys are documented and checked in :mod:`rlprof_torch.memory_options`. Snapshots
come from the CUDA allocator: without a CUDA device the backend writes nothing and says so
exactly once per process (through ``check_environment``, or at the first capture when nobody asked).
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
from pathlib import Path

from rlprof import hookimpl
from rlprof.layout import write_reserved
from rlprof.backend_api import mark_said, say_once

from . import memory_options
from .memory_options import DEFAULTS, validate  # noqa: F401  (validate: the section's checks, re-exported)
from .oom import OomWatch

log = logging.getLogger("rlprof.torch_memory")

NO_CUDA = (
    "no CUDA device (torch.cuda.is_available() is False): memory snapshots are recorded by the CUDA "
    "caching allocator, so torch_memory writes nothing on this machine"
)
NO_CUDA_SAID = "torch_memory: no CUDA"
"""The :mod:`rlprof.notices` key of the no-CUDA warning (said once per process)."""
SNAPSHOT_NAME = "rank{rank}.memory_snapshot.pickle"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


class TorchMemoryBackend:
    """One instance per :class:`rlprof.Profiler` (per process session when roles share a process)."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""

    def __init__(self) -> None:
        self._recording = False
        self._window = None
        """The hook context that opened the current window; None between windows."""
        self._regions: list[str] = []
        """Role regions open inside the recording, innermost last (the core sends ``stop_role``
        last-in-first-out): the innermost one labels the allocations."""
        self._oom: OomWatch | None = None
        self._last_closed = None
        """The last window closed whose group the core has not ended yet (None: no group in progress)."""

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return memory_options.validate(tool_config, key_path)

    @hookimpl
    def check_environment(self):
        if cuda_available():
            return []
        mark_said(NO_CUDA_SAID)  # the core logs what this returns: the one warning
        return [NO_CUDA]

    @hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self._open(ctx)

    @hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            self._open(ctx)
        if self._recording:
            self._regions.append(ctx.region)
            _label_allocations(ctx.region)

    @hookimpl
    def stop_role(self, ctx):
        if self._recording:
            self._regions.pop()
            _label_allocations(self._regions[-1] if self._regions else "")
        self._collect_oom(ctx)
        if ctx.closes_capture:
            self._close(ctx)

    @hookimpl
    def step_boundary(self, ctx):
        self._collect_oom(ctx)
        if ctx.closes_capture:
            self._close(ctx)

    @hookimpl
    def finalize(self, ctx):
        if self._oom is not None:
            self._oom.disarm(self)
        self._collect_oom(ctx)
        if not self._recording:
            return
        import torch

        if self._window is not None:  # a window left open (the core closes every one first): it ends its group
            self._close(ctx, covered=(*ctx.ends_group, *self._window.capture.steps))
        elif ctx.ends_group and self._last_closed is not None:  # the group left over, ended by the core now
            self._write(self._last_closed, ctx, ctx.ends_group)
        _label_allocations("")
        torch.cuda.memory._record_memory_history(enabled=None)
        self._recording = False

    # ------------------------------------------------------------------ windows

    def _open(self, ctx) -> None:
        if not cuda_available():
            say_once(NO_CUDA_SAID, log, "rlprof: backend 'torch_memory' on rank %d: %s", ctx.run.rank, NO_CUDA)
            return
        import torch

        cfg = ctx.tool_config
        if not self._recording or (cfg["clear_history"] and self._last_closed is None):
            # The first window starts recording; a later one, opening a new snapshot group, drops
            # what happened between windows (clear_history).
            torch.cuda.memory._record_memory_history(
                **memory_options.record_arguments(cfg, clear_history=self._recording and cfg["clear_history"]))
        if not self._recording and cfg["dump_on_oom"]:
            self._arm_oom(ctx)
        self._recording = True
        self._window = ctx

    def _close(self, ctx, covered=None) -> None:
        """End the open window; write the snapshot when this call ends its group (``ctx.ends_group``,
        the core's decision; ``covered`` overrides it for a window closed at finalize)."""
        opened, self._window = self._window, None
        if opened is None:
            return
        self._last_closed = opened
        covered = ctx.ends_group if covered is None else tuple(dict.fromkeys(covered))
        if covered:
            self._write(opened, ctx, covered)

    def _write(self, opened, sink, covered) -> None:
        """Dump the snapshot into ``opened``'s capture directory; list it through ``sink`` (the hook
        call under way), naming the step numbers (``covered``) and capture it covers."""
        import torch

        self._last_closed = None
        covered = list(covered)
        # A new file, whole or not at all, never through a link; rank<R>.1.memory_snapshot.pickle... where another
        # Profiler of this run and rank in this process wrote that capture's snapshot before (rlprof.layout.reserve).
        with write_reserved(opened.output_dir() / SNAPSHOT_NAME.format(rank=opened.run.rank), opened.run.run_dir) as reserved:
            pickle.dump(torch.cuda.memory._snapshot(), reserved.handle)
        path = reserved.path
        if opened.tool_config["memory_snapshot_num_steps"] > 1:
            # Snapshots of groups of windows belong to no single capture: each names the step numbers it covers.
            sink.add_artifact(path, steps=covered, step=covered[0], capture=None)
        elif sink.capture is opened.capture:
            sink.add_artifact(path)
        else:  # written at finalize for the window still open
            sink.add_artifact(path, steps=covered, step=covered[0],
                              capture=opened.capture.capture_id if opened.capture else None)

    # ------------------------------------------------------------------ out of memory

    def _arm_oom(self, ctx) -> None:
        try:
            self._oom = OomWatch.attach()
        except Exception as exc:
            log.warning("rlprof torch_memory: dump_on_oom: the CUDA OOM observer could not be attached: %s: %s",
                        type(exc).__name__, exc)
            return
        if self._oom is None:
            log.warning("rlprof torch_memory: dump_on_oom: this torch has no CUDA OOM observer (torch._C.%s); "
                        "no snapshot will be written on out-of-memory", "_cuda_attach_out_of_memory_observer")
            return
        process = dataclasses.replace(ctx, capture=None)  # output_dir(): the process's _process/ directory
        self._oom.arm(self, process.output_dir, ctx.run.run_dir)

    def _collect_oom(self, ctx) -> None:
        if self._oom is not None:
            for path in self._oom.take(self):
                ctx.add_artifact(path, trigger="oom")


def _label_allocations(region: str) -> None:
    """Attach ``region`` to the allocations that follow, where this torch has ``_set_memory_metadata``."""
    import torch

    setter = getattr(torch.cuda.memory, "_set_memory_metadata", None)
    if setter is not None:
        setter(region)
