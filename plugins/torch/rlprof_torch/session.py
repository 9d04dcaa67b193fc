"""One ``torch.profiler.profile`` session: from the hook that opens a capture window to the one that closes it.

A fresh profiler object per capture (rather than one reused with ``step()``) keeps each trace
independent: no warm-up cycles, no events carried over, and the metadata of one capture never
leaks into the next.

Each training step inside the capture is marked ``ProfilerStep#<step>``, the range
``torch.profiler.profile.step()`` would write: HTA and TensorBoard's profiler plugin cut a trace
into iterations by that name, so per-step analyses work on rlprof traces too.

A session is stopped only on the thread that started it (:class:`OtherThread`); its export may run
on any thread (the background writer's: :mod:`rlprof.runtime.trace_writer`). Where :mod:`~rlprof_torch.nogil` can, the stop,
the export and the freeing of torch's result run without the GIL: the process's other threads go on
meanwhile (the path taken is :attr:`TraceSession.stop_path`, in the trace's metadata and its manifest record).

Kineto's console log is switched off before the first session of a process (see
:func:`quiet_kineto`): otherwise every capture prints ``USDT:... profiler_start`` and
``profiler_stop`` lines into the training's stderr.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping

from . import nogil
from .metadata import torch_writes_distributed_info, trace_metadata

class OtherThread(RuntimeError):
    """The session was asked to stop from a thread other than the one that started it. Kineto keeps a
    session's state on its starting thread: stopped from another it finds none ("disableProfiler called
    but no active profiling session found") and exporting what it returns crashes the process (seen: a
    replica's exit handler finalizing on the main thread while its close waited on the event loop). The
    capture is given up, never stopped from there: the backend's error names it; the process lives."""


class TraceSession:
    """A running torch profiler plus what the capture has seen so far (step numbers, roles, regions)."""

    def __init__(self, capture_id: str, run, directory: Path, profile_arguments: Mapping[str, Any],
                 peak: Mapping[str, Any] | None = None):
        import torch.profiler

        self.capture_id = capture_id
        self.run = run
        self.directory = directory
        self.seen_steps: list[int] = []
        self.seen_roles: list[str] = []
        self.seen_regions: list[str] = []
        self._profile = torch.profiler.profile(**profile_arguments)
        self.peak = peak
        """The peak this capture's FLOPs are divided by (:class:`rlprof.peak.Peak` as a dict), where it counts FLOPs."""
        self._step_range = None
        self._distributed_info_written = False
        self._thread: int | None = None
        """The thread that started the profiler: the only one that may stop it."""
        self.stop_path: str | None = None
        """How the capture was stopped (:data:`~rlprof_torch.nogil.NOGIL` or :data:`~rlprof_torch.nogil.TORCH`),
        once :meth:`stop` has run; its export and free take the same path."""

    def start(self) -> None:
        quiet_kineto()
        self._thread = threading.get_ident()
        self._profile.start()
        # torch adds its own distributedInfo as it starts, if a process group exists by then.
        self._distributed_info_written = torch_writes_distributed_info()

    def begin_step(self, step: int) -> None:
        """Open the ``ProfilerStep#<step>`` range (closing the previous step's, if still open)."""
        from torch.autograd.profiler import record_function

        self.end_step()
        self._step_range = record_function(f"ProfilerStep#{step}")
        self._step_range.__enter__()
        self.saw(step)

    def end_step(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    def saw(self, step: int | None, role: str | None = None, region: str | None = None) -> None:
        """Remember a step/role/region that ran inside the capture, for the trace's metadata."""
        for seen, value in ((self.seen_steps, step), (self.seen_roles, role), (self.seen_regions, region)):
            if value is not None and value not in seen:
                seen.append(value)

    def stop(self) -> None:
        """Stop the profiler: the one step that must run on the thread that started it (Kineto crashes
        when stopped from another), without the GIL where :mod:`~rlprof_torch.nogil` can. The trace's
        metadata goes in first, the path the stop is to take among it."""
        if threading.get_ident() != self._thread:
            raise OtherThread(f"torch.profiler was started on thread {self._thread} and cannot be stopped from thread "
                              f"{threading.get_ident()} ({threading.current_thread().name}): capture {self.capture_id}'s "
                              "trace is not written")
        self.end_step()
        planned = nogil.TORCH if nogil.unavailable() else nogil.NOGIL
        metadata = trace_metadata(self.run, self.capture_id, self.seen_steps, self.seen_roles, self.seen_regions,
                                  distributed_info=not self._distributed_info_written, stop_path=planned,
                                  peak=self.peak)
        for key, value in metadata.items():
            self._profile.add_metadata_json(key, value)
        self.stop_path = nogil.stop(self._profile)

    def export(self, path: Path) -> None:
        """Write the stopped profiler's trace to ``path`` as plain JSON, from any thread (the
        background writer's), then free torch's result (left alone, Python's cycle collector
        would free it later, on whatever thread: :func:`~rlprof_torch.nogil.free`). Kineto's export takes
        about 1.2 µs an event on this CPU (0.5 s for 374k events) and the free a fifth of that: on the fast path
        (:data:`~rlprof_torch.nogil.NOGIL`) both run without the GIL and the process's other threads go
        on; on torch's own path both hold it, and every other thread, the training's included, waits
        that long if it needs the GIL meanwhile. torch writes by path (following links, replacing
        files), hence a path in the backend's private :class:`rlprof.layout.ScratchDir`."""
        try:
            self._profile.export_chrome_trace(str(path))
        finally:
            nogil.free(self._profile)

    @property
    def plain_name(self) -> str:
        """The plain JSON's name in the scratch directory: the capture id is in it, as several captures
        may wait to be written."""
        return f"{self.capture_id}.{self.trace_name[:-3]}"

    @property
    def trace_name(self) -> str:
        """``rank<R>.pt.trace.json.gz``: the rank is in the name so that one capture's traces from every
        rank can be put in one directory (what HTA loads) without renaming; ``<worker>.pt.trace.json.gz``
        is the name TensorBoard's profiler plugin looks for."""
        return f"rank{self.run.rank}.pt.trace.json.gz"


KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
KINETO_SILENT = "6"
"""Above Kineto's highest level (VERBOSE 0, INFO 1, WARNING 2, STAGE 3, ERROR 4, USDT 5).

torch 2.13's Kineto logs ``USDT:<time> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start``
(and ``profiler_stop``) to stderr at its highest level, USDT, for every profiler start and stop, so no
level shows Kineto's errors without those lines; rlprof hides both. ``KINETO_LOG_LEVEL=4`` (set
before the first capture) brings Kineto's errors back, with the USDT lines."""


def quiet_kineto() -> None:
    """Silence Kineto's console log for this process unless the user chose a level.

    Kineto reads ``KINETO_LOG_LEVEL`` once, when the process's first profiler starts, so this must
    run before that; it is a no-op afterwards and when the variable is already set."""
    os.environ.setdefault(KINETO_LOG_LEVEL, KINETO_SILENT)
