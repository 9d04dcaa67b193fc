"""The ``nsys`` backend: NVTX ranges per step and region, cudaProfilerStart/Stop per capture window.

The core decides what is captured; this class only translates each hook into the calls Nsight
Systems understands. For one process the translation is::

    start_step     [cudaProfilerStart if ctx.opens_capture]  NVTX range "step<N>" opens
    start_role     [cudaProfilerStart if ctx.opens_capture]  NVTX range ctx.region opens (nested)
    iteration_boundary  NVTX mark "<region> iteration" (payload: the iteration)
    step_boundary  range "step<N>" closes (not again for a late close,
                   ctx.ends_step False)                                     [cudaProfilerStop if ctx.closes_capture]
    stop_role      range ctx.region closes                                  [cudaProfilerStop if ctx.closes_capture]
    finalize       close whatever is open; with ctx.relocate_results, move this pid's reports
                   out of Ray's nsight directory (see rlprof_nsys.relocation)

Outside a run: ``report_details`` (``rlprof report``: a report's NVTX summary), ``after_exit`` (the
Ray controller, on each node once the workers exited: move the reports nsys wrote at exit) and
``cli_commands`` (``rlprof relocate``, the same by hand).

Windows are cudaProfilerStart/Stop or, with ``capture_range: nvtx``, the NVTX range ``rlprof_capture``;
a process started by ``nsys profile --capture-range=...`` follows that command line (:func:`capture_range`).
A window opens before its first range starts and closes after its last range ends, so the ranges
sit inside the report. Each window boundary is also an NVTX mark (``capture <id> start``/``end``),
which makes the windows visible to any NVTX tool, not only to nsys.

On the Ray controller, ``worker_runtime_env`` starts each profiled worker under
``nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat-shutdown:N``
(see :mod:`rlprof_nsys.launch`).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from rlprof import hookimpl
from rlprof.hookspecs import CliCommand, TraceReader
from rlprof.notices import say_once

from . import launch, options, relocation
from .ranges import NVTX_CAPTURE, STEP_COLOR, RangeStack, role_color
from .reports import nsys_ancestor, nsys_option, reports_of, running_under_nsys
from .windows import CaptureWindows, NvtxWindowRange

log = logging.getLogger("rlprof")


def capture_range(tool_config) -> str:
    """How this process's capture windows open: as the ``nsys profile`` that started it waits for them
    (its ``--capture-range``), else ``tool_config``'s ``capture_range``.

    The nsys command line is the truth: a window of the other kind is never captured. The two differ
    when the worker's launch options and its backend's section come from different places, as under
    verl, which launches workers with ``global_tool_config.nsys.worker_nsight_options`` but hands each
    worker only its role's section (where ``capture_range`` is then the default, cudaProfilerApi).
    """
    configured = tool_config.get(options.RANGE) or options.CAPTURE_RANGE
    launched = nsys_option("c", "capture-range")
    if launched not in options.CAPTURE_RANGES or launched == configured:
        return configured
    say_once("nsys: capture range from launch", log,
             "rlprof nsys: process %d runs under nsys --capture-range=%s: capture windows follow it (capture_range "
             "in this process's tool_config says %s)", os.getpid(), launched, configured, level=logging.INFO)
    if launched == options.NVTX:
        given = nsys_option(None, "nvtx-capture")
        if given != NVTX_CAPTURE:
            say_once("nsys: nvtx-capture", log,
                     "rlprof nsys: this process's nsys captures NVTX range %r, but rlprof's windows are %r: "
                     "set worker_nsight_options nvtx-capture to %s", given, NVTX_CAPTURE, NVTX_CAPTURE,
                     level=logging.WARNING)
    return launched


class NsysBackend:
    """One per :class:`rlprof.Profiler` (the core instantiates it with no arguments)."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""

    def __init__(self) -> None:
        self.ranges = RangeStack()
        self.windows = CaptureWindows()
        self._relocated = False

    @property
    def windows_opened(self) -> int:
        """Capture windows opened so far, with or without CUDA: what ``repeat-shutdown:N`` must match."""
        return self.windows.opened

    def open_captures(self) -> list[str]:
        """Capture ids of windows opened and not closed yet (the conformance suite's leak check)."""
        window = self.windows.current
        return [window.capture_id] if window is not None else []

    # ------------------------------------------------------------------ checks

    @hookimpl
    def validate_tool_config(self, tool_config: Mapping[str, Any], key_path: str) -> Mapping[str, Any]:
        return options.validate(tool_config, key_path)

    @hookimpl
    def check_environment(self) -> list[str]:
        # No CUDA is not a problem here: with capture_range nvtx windows need none, and with
        # cudaProfilerApi the first window says so (this hook cannot see the tool_config).
        problems = []
        nsys = None if running_under_nsys() else launch.nsys_problem()
        if nsys:
            problems.append(nsys)
        return problems

    # ------------------------------------------------------------------ lifecycle

    @hookimpl
    def start_step(self, ctx) -> None:
        if ctx.opens_capture:
            self._open_window(ctx, region=None)
        self.ranges.open(f"step{ctx.step}", STEP_COLOR, "step")

    @hookimpl
    def start_role(self, ctx) -> None:
        if ctx.opens_capture:
            self._open_window(ctx, region=ctx.region)
        self.ranges.open(ctx.region, role_color(ctx.role), ctx.role)

    @hookimpl
    def stop_role(self, ctx) -> None:
        self.ranges.close()
        if ctx.closes_capture:
            self._close_window()

    @hookimpl
    def iteration_boundary(self, ctx) -> None:
        self.ranges.mark(f"{ctx.region} iteration", payload=ctx.iteration)

    @hookimpl
    def step_boundary(self, ctx) -> None:
        if ctx.ends_step:
            self.ranges.close()
        if ctx.closes_capture:
            self._close_window()

    @hookimpl
    def finalize(self, ctx) -> None:
        self.ranges.close_all()
        self._close_window()
        if ctx.relocate_results:
            if not self._relocated:  # once: a second finalize must not list the pending reports again
                self._relocated = True
                relocation.relocate_at_finalize(ctx, self.windows.windows)
        elif self.windows.started:
            files = reports_of(ctx.run.pid, ctx.tool_config)
            log.info("rlprof nsys: reports of process %d go to %s/%s[.<k>].nsys-rep (relocate_results is off)",
                     ctx.run.pid, files.directory, files.base)

    # ------------------------------------------------------------------ Ray

    @hookimpl
    def worker_runtime_env(self, ctx) -> Mapping[str, Any] | None:
        if not ctx.captures:
            return None
        problem = launch.nsys_problem()
        if problem:  # said once per process, not once per worker actor
            say_once("nsys: not on PATH", log, "rlprof nsys: %s", problem, level=logging.ERROR)
        return launch.worker_runtime_env(
            ctx.tool_config, captures=ctx.captures, expected_captures=ctx.expected_captures,
            who=f"rank {ctx.rank}, roles {'+'.join(ctx.roles)}", rank=ctx.rank,
        )

    # ------------------------------------------------------------------ outside a run

    @hookimpl
    def report_details(self, path) -> list[str]:
        from .nvtx_summary import nvtx_details  # sqlite3 and nsys stats: only when a report asks

        return nvtx_details(path)

    @hookimpl
    def after_exit(self, run_dirs) -> int:
        return relocation.relocate_after_exit(run_dirs)

    @hookimpl
    def cli_commands(self) -> Mapping[str, CliCommand]:
        return {"relocate": CliCommand("move pending nsys reports into the run layout (run on each node after the "
                                       "profiled workers exited)", _relocate, "PATH... [--wait S] [--settle S]")}

    @hookimpl
    def trace_reader(self) -> TraceReader:
        """``nsys export --type sqlite`` output, or a report exported once beside itself
        (:mod:`rlprof_nsys.sqlite_reader`)."""
        return TraceReader(patterns=("*.sqlite", "*.nsys-rep"), target="rlprof_nsys.sqlite_reader:read_trace",
                           format="Nsight Systems SQLite export", viewer="Nsight Systems (nsys-ui)")

    # ------------------------------------------------------------------ windows

    def _open_window(self, ctx, region: str | None) -> None:
        capture = ctx.capture
        nsys_ancestor()  # remembered now: after the last window nsys may be gone (see rlprof_nsys.reports)
        if capture_range(ctx.tool_config) == options.NVTX:
            self.windows.use(NvtxWindowRange(self.ranges))
        window = self.windows.open(capture.capture_id, ctx.step, region, capture.directory / ctx.backend)
        self.ranges.mark(f"capture {window.capture_id} start")

    def _close_window(self) -> None:
        window = self.windows.current
        if window is not None:
            self.ranges.mark(f"capture {window.capture_id} end")
            self.windows.close()


def _relocate(argv: list[str]) -> int:
    """``rlprof relocate``: :func:`rlprof_nsys.__main__.relocate_command`, imported when it runs."""
    from .__main__ import relocate_command

    return relocate_command(argv)
