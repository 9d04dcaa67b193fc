"""The ``npu`` backend: how a capture window becomes a torch_npu profiler run on Ascend.

The core decides what is captured and tells this backend through the context flags:
``ctx.opens_capture`` builds and starts one :class:`~rlprof_npu.capture.NpuCapture` writing under
``ctx.output_dir()``; ``ctx.closes_capture`` stops it and lists its ``*_ascend_pt`` directories in
the manifest (``kind: ascend_pt``, with ``analysis`` telling ``rlprof npu-analyse`` whether they
still need parsing). Every region gets an mstx range named ``ctx.region``, in whichever capture
is open; the core sends ``stop_role`` last-in-first-out, so the open ranges are a plain stack.

Without torch_npu (no CANN here) the hooks do nothing at all: no capture, no files; the problem
is reported once per process, by ``check_environment`` (which the Profiler logs), or by the first
capture when nobody asked.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from rlprof import hookimpl
from rlprof.backend_api import CliCommand, mark_said, say_once, TraceReader

from .capture import ARTIFACT_KIND, NpuCapture, range_end, range_start
from .settings import npu_settings
from .torch_npu_import import TorchNpuImport

log = logging.getLogger("rlprof.npu")

NO_TORCH_NPU_SAID = "npu: torch_npu missing"
"""The :mod:`rlprof.notices` key of the missing-torch_npu warning."""
NOT_TRACES = ("profiler_info*.json", "profiler_metadata.json", "communication.json", "communication_matrix.json",
              "msprof_*.json")
"""The JSON files torch_npu (and CANN under it) writes in a capture that are not its trace view."""


class NpuBackend:
    """One per :class:`rlprof.Profiler` (the core instantiates it); holds at most one open capture."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""

    def __init__(self) -> None:
        self._torch_npu = TorchNpuImport()
        self._capture: NpuCapture | None = None
        self._capture_id: str | None = None
        self._ranges: list[int] = []
        """Ids of the open mstx ranges, innermost last."""

    # ------------------------------------------------------------------ outside a run

    @hookimpl
    def cli_commands(self) -> Mapping[str, CliCommand]:
        return {"npu-analyse": CliCommand("parse NPU captures collected with analysis: false (needs torch_npu and "
                                          "CANN, no device)", _analyse, "PATH [--all] [--list]")}

    @hookimpl
    def trace_reader(self) -> TraceReader:
        """torch_npu's ``ASCEND_PROFILER_OUTPUT/trace_view.json`` (:mod:`rlprof_npu.trace_reader`); its
        literal name wins over rlprof-torch's ``*.json``. The other JSON torch_npu writes in a capture
        (rank and metadata files, HCCL's summaries, CANN's own ``msprof_*.json`` timeline) are named as
        not traces, so a folder walk passes them over instead of reading them as Kineto."""
        return TraceReader(patterns=("trace_view.json",), target="rlprof_npu.trace_reader:read_trace",
                           format="torch_npu trace view", not_traces=NOT_TRACES, chrome=True)

    # ------------------------------------------------------------------ configuration and environment

    @hookimpl
    def validate_tool_config(self, tool_config: Mapping[str, Any], key_path: str) -> Mapping[str, Any]:
        return npu_settings(tool_config, key_path).as_tool_config()

    @hookimpl
    def check_environment(self) -> list[str]:
        problem = self._torch_npu.problem()
        if problem is None:
            return []
        mark_said(NO_TORCH_NPU_SAID)  # the core logs what this returns: the one warning
        return [problem]

    # ------------------------------------------------------------------ the lifecycle

    @hookimpl
    def start_step(self, ctx) -> None:
        if ctx.opens_capture:
            self._open(ctx)

    @hookimpl
    def start_role(self, ctx) -> None:
        if ctx.opens_capture:
            self._open(ctx)
        torch_npu = self._module()
        if torch_npu is not None:
            self._ranges.append(range_start(torch_npu, ctx.region))

    @hookimpl
    def stop_role(self, ctx) -> None:
        if self._ranges:  # empty without torch_npu (no range began)
            range_end(self._torch_npu.module(), self._ranges.pop())
        if ctx.closes_capture:
            self._close(ctx)

    @hookimpl
    def step_boundary(self, ctx) -> None:
        if ctx.closes_capture:
            self._close(ctx)

    @hookimpl
    def finalize(self, ctx) -> None:
        # The core closes every window before finalize, also for a backend that raised; what is
        # still open here is what a hook of ours left half-done: stop it so torch_npu writes its data.
        while self._ranges:
            range_end(self._torch_npu.module(), self._ranges.pop())
        if self._capture is not None:
            self._stop(ctx)

    # ------------------------------------------------------------------ helpers

    def _module(self):
        """torch_npu, or None; says why once when check_environment did not already."""
        torch_npu = self._torch_npu.module()
        if torch_npu is None:
            say_once(NO_TORCH_NPU_SAID, log, "rlprof: backend 'npu': %s", self._torch_npu.problem())
        return torch_npu

    def _open(self, ctx) -> None:
        torch_npu = self._module()
        if torch_npu is None:
            return
        settings = npu_settings(ctx.tool_config)
        if settings.flops:  # the device's peak, measured once per run and host before the capture starts
            try:
                ctx.run.peak("npu:0")
            except Exception as exc:  # the capture goes on; its rows say the peak is unknown
                log.debug("rlprof: no peak for npu:0: %s: %s", type(exc).__name__, exc)
        capture = NpuCapture(torch_npu, settings, ctx.output_dir())
        capture.start()
        self._capture, self._capture_id = capture, ctx.capture.capture_id

    def _close(self, ctx) -> None:
        if self._capture is not None:  # None when torch_npu is missing: nothing was opened
            self._stop(ctx)

    def _stop(self, ctx) -> None:
        capture = self._capture
        self._capture = self._capture_id = None
        for path in capture.stop():
            ctx.add_artifact(path, kind=ARTIFACT_KIND, analysis=capture.analysis)


def _analyse(argv: list[str]) -> int:
    """``rlprof npu-analyse``: :func:`rlprof_npu.analyse.main`, imported when it runs (it imports this module)."""
    from .analyse import main

    return main(argv)
