"""Capture windows: ``cudaProfilerStart``/``cudaProfilerStop`` (or an NVTX range) around each capture the core asks for.

A worker launched by Ray under ``nsys profile --capture-range=cudaProfilerApi`` records nothing
until cudaProfilerStart and stops at cudaProfilerStop; with ``--capture-range-end=repeat...`` each
start/stop pair becomes one report, ``worker_process_<pid>.<k>.nsys-rep`` for the k-th window. So
the order of windows opened here is also the numbering of the reports nsys writes (see
:mod:`rlprof_nsys.relocation`), and :attr:`CaptureWindows.opened` is the N that
``repeat-shutdown:N`` must equal.

With ``capture_range: cudaProfilerApi`` (the default) the calls go through ``torch.cuda.profiler``
(torch is optional for this package): without torch or without a CUDA device the window is still
counted and recorded, but not started, and one warning says so. With ``capture_range: nvtx`` a
window is the NVTX range ``rlprof_capture`` (:class:`NvtxWindowRange`), which nsys turns into a
capture with ``--capture-range=nvtx``: no CUDA needed. The step and region ranges do not depend on either.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("rlprof")


@dataclass(frozen=True)
class Window:
    """One capture window, in the order it was opened in its process (``index`` 1, 2, ...: nsys' report number,
    counted across the process's backend instances: :class:`ProcessWindows`)."""

    index: int
    capture_id: str
    step: int
    region: str | None
    """The region a per-region capture was opened for; None for a step capture."""
    directory: Path
    """This backend's folder of the capture in the run layout (created only when a file lands there)."""
    started: bool
    """cudaProfilerStart was really called (CUDA available)."""


class ProcessWindows:
    """The numbers of the windows opened in this process, whichever backend instance opened them: nsys numbers
    a process's reports in the order its windows open, so a second Profiler of the same process (a worker set
    up twice, colocated roles) continues the count (its first window is report 3 after the first one's 1 and
    2) instead of claiming reports 1 and 2 again. A forked child starts from 1, as nsys counts it anew."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Start counting again from 1 (a fresh process; tests that stand for one)."""
        self.pid = os.getpid()
        self.opened = 0

    def next(self) -> int:
        with self._lock:
            if self.pid != os.getpid():
                self.reset()
            self.opened += 1
            return self.opened

    def opened_here(self, number: int) -> bool:
        """Window ``number`` was opened in this process (by this backend instance or another)."""
        return self.pid == os.getpid() and 1 <= number <= self.opened


PROCESS_WINDOWS = ProcessWindows()


class CaptureWindows:
    """Opens and closes capture windows for one backend instance and remembers each one."""

    def __init__(self, driver: Any = None) -> None:
        """:param driver: an object with ``start()``/``stop()`` to use instead of CUDA's profiler API
            (tests); by default :class:`CudaProfilerApi` when this process has CUDA."""
        self.windows: list[Window] = []
        self._open: Window | None = None
        self._driver: Any = driver
        """What starts and stops windows; False once known unusable, None before the first window."""

    @property
    def opened(self) -> int:
        """How many windows were opened, with or without CUDA (what nsys would number)."""
        return len(self.windows)

    @property
    def started(self) -> int:
        """How many of them really called cudaProfilerStart."""
        return sum(1 for w in self.windows if w.started)

    @property
    def current(self) -> Window | None:
        """The window open now, if any."""
        return self._open

    def use(self, driver: Any) -> None:
        """Open windows with ``driver`` (``start()``/``stop()``, optional ``live``) from now on,
        unless one was chosen already (the first window decides, as nsys was started with one mode)."""
        if self._driver is None:
            self._driver = driver

    def open(self, capture_id: str, step: int, region: str | None, directory: Path) -> Window:
        """Open a window: cudaProfilerStart when CUDA is there. The core's capture state machine never
        opens a window while another is open, so there is nothing to guard here."""
        if self._driver is None:
            self._driver = _cuda_driver()
        if self._driver:
            self._driver.start()
        started = bool(self._driver) and getattr(self._driver, "live", True)
        window = Window(PROCESS_WINDOWS.next(), capture_id, step, region, directory, started=started)
        self.windows.append(window)
        self._open = window
        return window

    def close(self) -> Window | None:
        """Close the open window. Returns it, or None when none was open."""
        window, self._open = self._open, None
        if window is not None and self._driver:
            self._driver.stop()
        return window


class NvtxWindowRange:
    """A window as the NVTX range ``rlprof_capture`` (``capture_range: nvtx``); ``live`` when an
    NVTX tool records it (under nsys: when nsys will capture it)."""

    def __init__(self, ranges: Any) -> None:
        self._ranges = ranges
        self._open = 0

    @property
    def live(self) -> bool:
        return self._ranges.attached

    def start(self) -> None:
        self._open = self._ranges.window_start()

    def stop(self) -> None:
        range_id, self._open = self._open, 0
        self._ranges.window_end(range_id)


class CudaProfilerApi:
    """cudaProfilerStart/Stop through ``torch.cuda.profiler``."""

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        import torch.cuda.profiler as profiler

        self._profiler = profiler

    def start(self) -> None:
        self._profiler.start()

    def stop(self) -> None:
        # Kernels are queued asynchronously: wait for the device so the ones launched inside the
        # window are recorded in it (one synchronisation per window, never per step of a region).
        self._torch.cuda.synchronize()
        self._profiler.stop()


def _cuda_driver() -> Any:
    """:class:`CudaProfilerApi` when this process can drive CUDA's profiler, else False (after one warning)."""
    try:
        import torch
    except ImportError:
        log.warning(
            "rlprof nsys: torch is not installed, so capture windows (cudaProfilerStart/Stop) are skipped; "
            "NVTX ranges are still emitted and windows still counted"
        )
        return False
    if not torch.cuda.is_available():
        log.warning(
            "rlprof nsys: no CUDA device in process %d, so capture windows (cudaProfilerStart/Stop) are skipped; "
            "NVTX ranges are still emitted and windows still counted", os.getpid(),
        )
        return False
    return CudaProfilerApi(torch)
