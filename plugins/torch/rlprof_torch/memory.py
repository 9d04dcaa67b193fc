"""The ``torch_memory`` backend: a CUDA caching-allocator snapshot (``.pickle``) per capture window.

History recording (``torch.cuda.memory._record_memory_history``) starts when the first capture
opens and stays on until ``finalize``; each later capture clears the history as it opens, so
every snapshot holds the alloc/free events of its own window plus the state of every live block.
Each close dumps ``rank<R>.memory_snapshot.pickle`` (open it at https://pytorch.org/memory_viz or
with ``python -m torch.cuda._memory_viz trace_plot``). While a role region runs, its name is
attached to every allocation (``_set_memory_metadata``), so the viewer says which role allocated what.

Snapshots come from the CUDA allocator: without a CUDA device the backend writes nothing and says
so exactly once (through ``check_environment``, or at the first capture when nobody asked).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping

from rlprof import hookimpl
from rlprof.errors import fail
from rlprof.tool_config import check_keys

log = logging.getLogger("rlprof.torch_memory")

NO_CUDA = (
    "no CUDA device (torch.cuda.is_available() is False): memory snapshots are recorded by the CUDA "
    "caching allocator, so torch_memory writes nothing on this machine"
)
CONTEXTS = (None, "state", "alloc", "all")
STACKS = ("python", "all")
VERL_UNUSED_KEYS = ("kw_args", "memory_snapshot_num_steps", "dump_on_oom")
"""Keys verl defines for torch_memory that rlprof does not need (the core's plan says when to capture)."""
DEFAULTS = {"trace_alloc_max_entries": 100_000, "stack_depth": 32, "context": "all", "stacks": "all"}
"""verl's defaults for the first two; torch's for ``context`` and ``stacks``."""


def validate(tool_config: Mapping[str, Any], key_path: str) -> dict[str, Any]:
    """Check ``tool_config.torch_memory``; return every used key with its default filled in.

    ``stack_depth`` is checked and kept for verl compatibility, but torch 2.13's recorder has no
    depth limit to give it to (``stacks: python`` is the way to get shorter tracebacks)."""
    check_keys(tool_config, key_path, used=tuple(DEFAULTS), ignored=VERL_UNUSED_KEYS)
    config = {**DEFAULTS, **{k: v for k, v in tool_config.items() if k in DEFAULTS}}
    for name in ("trace_alloc_max_entries", "stack_depth"):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise fail(f"{key_path}.{name}", value, "a positive integer")
    for name, allowed in (("context", CONTEXTS), ("stacks", STACKS)):
        if config[name] not in allowed:
            raise fail(f"{key_path}.{name}", config[name], ", ".join("null" if a is None else a for a in allowed))
    return config


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


class TorchMemoryBackend:
    """One instance per :class:`rlprof.Profiler`."""

    def __init__(self) -> None:
        self._recording = False
        self._window_dir: Path | None = None
        """Where the open capture window's snapshot goes; None between windows."""
        self._regions: list[str] = []
        self._no_cuda_said = False

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return validate(tool_config, key_path)

    @hookimpl
    def check_environment(self):
        if cuda_available():
            return []
        self._no_cuda_said = True  # the core logs what this returns: the one warning
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
        if self._recording and ctx.region in self._regions:
            del self._regions[len(self._regions) - 1 - self._regions[::-1].index(ctx.region)]
            _label_allocations(self._regions[-1] if self._regions else "")
        if ctx.closes_capture:
            return self._dump(ctx.run.rank)
        return None

    @hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            return self._dump(ctx.run.rank)
        return None

    @hookimpl
    def finalize(self, ctx):
        if not self._recording:
            return None
        import torch

        path = self._dump(ctx.run.rank)
        _label_allocations("")
        torch.cuda.memory._record_memory_history(enabled=None)
        self._recording = False
        return path

    def _open(self, ctx) -> None:
        if not cuda_available():
            if not self._no_cuda_said:
                self._no_cuda_said = True
                log.warning("rlprof: backend 'torch_memory' on rank %d: %s", ctx.run.rank, NO_CUDA)
            return
        import torch

        cfg = ctx.tool_config
        # The first window starts recording; later ones only drop what happened between windows.
        torch.cuda.memory._record_memory_history(
            enabled="all", context=cfg["context"], stacks=cfg["stacks"],
            max_entries=cfg["trace_alloc_max_entries"], clear_history=self._recording,
        )
        self._recording = True
        self._window_dir = ctx.output_dir()

    def _dump(self, rank: int) -> Path | None:
        """Write the open window's snapshot; None when no window is open (or there is no CUDA)."""
        directory, self._window_dir = self._window_dir, None
        if directory is None:
            return None
        import torch

        path = directory / f"rank{rank}.memory_snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
        return path


def _label_allocations(region: str) -> None:
    """Attach ``region`` to the allocations that follow, where this torch has ``_set_memory_metadata``."""
    import torch

    setter = getattr(torch.cuda.memory, "_set_memory_metadata", None)
    if setter is not None:
        setter(region)
