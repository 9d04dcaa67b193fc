"""Snapshot on CUDA out-of-memory: torch's allocator observer, attached once per process.

``torch._C._cuda_attach_out_of_memory_observer(callback)`` (CUDA builds of torch; torch 2.13 has
no public wrapper and no way to detach) makes the caching allocator call
``callback(device, requested_bytes, device_total, device_free)`` when an allocation fails, in the
failing thread, before ``torch.OutOfMemoryError`` is raised. That is the last moment the allocator
state that caused the OOM can be seen, so the callback dumps a snapshot then.

Because the observer is process-wide and permanent, one :class:`OomWatch` is attached per process
and dispatches to whichever ``torch_memory`` backends are armed (one per live Profiler, usually
one); a backend disarms at finalize. The callback never synchronizes (the stream may be broken
after an OOM), never raises (it runs inside the allocator) and writes a new file only.
"""

from __future__ import annotations

import logging
import pickle
import threading
from pathlib import Path
from typing import Callable

log = logging.getLogger("rlprof.torch_memory")

ATTACH = "_cuda_attach_out_of_memory_observer"
"""The attribute of ``torch._C`` (present in CUDA builds only)."""


class OomWatch:
    """The process's one OOM observer; backends :meth:`arm` it with a function that says where to
    write, and collect what was written with :meth:`take`."""

    _instance: "OomWatch | None" = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        self.armed: dict[int, tuple[Callable[[], Path], Path]] = {}
        self.written: dict[int, list[Path]] = {}

    @classmethod
    def attach(cls) -> "OomWatch | None":
        """The process's watch, attached on first use; None where this torch cannot observe OOMs."""
        with cls._lock:
            if cls._instance is None:
                import torch

                attach = getattr(torch._C, ATTACH, None)
                if attach is None:
                    return None
                watch = cls()
                attach(watch._on_oom)
                cls._instance = watch
            return cls._instance

    def arm(self, owner: object, directory: Callable[[], Path], root: Path) -> None:
        """On an OOM, write a snapshot for ``owner`` into ``directory()`` (called only then), which
        lies under ``root`` (the run directory: nothing is written through a link below it)."""
        self.armed[id(owner)] = (directory, root)

    def disarm(self, owner: object) -> None:
        self.armed.pop(id(owner), None)

    def take(self, owner: object) -> list[Path]:
        """Snapshots written for ``owner`` since the last call."""
        return self.written.pop(id(owner), [])

    def _on_oom(self, device: int, requested: int, device_total: int, device_free: int) -> None:
        for owner, (directory, root) in list(self.armed.items()):
            try:
                path = write_snapshot(directory(), root, "oom")
            except Exception as exc:  # inside the allocator: never raise
                log.error("rlprof torch_memory: CUDA out of memory on device %s; the snapshot could not be written: %s: %s",
                          device, type(exc).__name__, exc)
                continue
            self.written.setdefault(owner, []).append(path)
            log.error("rlprof torch_memory: CUDA out of memory on device %s (%s bytes requested, %s of %s bytes free); "
                      "allocator snapshot written to %s", device, requested, device_free, device_total, path)


def write_snapshot(directory: Path, root: Path, label: str) -> Path:
    """Pickle ``torch.cuda.memory._snapshot()`` into a new file ``<directory>/<label>.memory_snapshot.pickle``;
    never replaces a file (a second OOM gets ``.1``, ``.2``...: :func:`rlprof.layout.reserve`). No device
    synchronization."""
    import torch

    from rlprof.layout import write_reserved

    snapshot = torch.cuda.memory._snapshot()
    with write_reserved(directory / f"{label}.memory_snapshot.pickle", root) as reserved:
        pickle.dump(snapshot, reserved.handle)
    return reserved.path
