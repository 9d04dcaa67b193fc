"""The ``torch`` backend: a torch.profiler Chrome trace per capture window, role regions as named ranges.

What the hooks do (the core's capture state machine decides when a capture opens and closes, and
never opens one inside another; this module only follows ``ctx.opens_capture``/``ctx.closes_capture``):

* a hook with ``opens_capture`` starts a :class:`~rlprof_torch.session.TraceSession`; each step
  inside it is marked ``ProfilerStep#<step>`` (from ``start_step``, or from the ``start_role`` that
  opened the capture, to the end of the step or of the capture);
* every ``start_role``/``stop_role`` enters/exits ``record_function(ctx.region)``, so the trace
  shows ``actor_update``, ``ref_compute_log_prob``... as ``user_annotation`` events (the core sends
  ``stop_role`` last-in-first-out, so the open ranges are a plain stack);
* a hook with ``closes_capture`` stops the session (what must happen on the training thread), then
  hands it to the process's :class:`~rlprof.runtime.TraceWriter`, which exports its plain JSON
  and compresses it into ``rank<R>.pt.trace.json.gz`` (in ``ctx.output_dir()``) in the background.
  The stop, the export and the freeing of torch's result run without the GIL where
  :mod:`~rlprof_torch.nogil` can (the record says ``stop_path: "nogil"``); elsewhere through torch's own
  calls (``"torch"``), and the first capture that closes so says why, once per process (a warning record).
  The trace is listed at once with ``state: "writing"`` and, from the next hook call after it is in
  place, again with ``state: "written"``, its size and sha256: the step waits for neither the export,
  the compression nor the disk. One that could not be written is listed ``"failed"`` with the error, and
  that hook raises :class:`TraceNotWritten` (the core records the error and releases the backend, as
  when the write failed inside the step);
* ``finalize`` closes whatever is still open, waits for the traces still being written (at most
  ``RLPROF_TORCH_WRITE_TIMEOUT_S``, default 300 s; those left unfinished stay ``writing`` in the
  manifest and are named in a warning) and removes the private directory torch exported into.
* outside a run, ``trace_reader`` names the Kineto reader the breakdown analysis uses on its traces.
"""

from __future__ import annotations

import logging

from rlprof import hookimpl
from rlprof.errors import ConfigError
from rlprof.backend_api import Export, TraceReader, TraceWriter, mark_said, process_writer
from rlprof.layout import ScratchDir, reserve

from . import nogil, options, writer
from .session import TraceSession

log = logging.getLogger("rlprof.torch")


FALLBACK_SAID = "torch: captures end with the GIL held"
"""The :mod:`rlprof.notices` key of the fallback's one warning per process."""


class TraceNotWritten(RuntimeError):
    """A capture's trace could not be compressed or put under its name by the background writer."""


class TorchBackend:
    """One instance per :class:`rlprof.Profiler`; holds at most one running trace."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""

    def __init__(self) -> None:
        self._session: TraceSession | None = None
        self._ranges: list = []
        """Open ``record_function`` ranges, innermost last."""
        self._scratch: ScratchDir | None = None
        """Where torch exports each capture's plain JSON before it is compressed (made at the first
        export, in that capture's directory, and reused: see :class:`rlprof.layout.ScratchDir`)."""
        self._record_function = None
        """``torch.autograd.profiler.record_function``, imported at the first range (importing this
        module does not import torch)."""
        self._arguments: dict[tuple[str, ...], dict] = {}
        """``contents`` -> profiler arguments, worked out at a capture's first opening (whether CUDA is
        there does not change while the process runs)."""
        self._writer: TraceWriter | None = None
        """The process's background writer, from this backend's first export on."""

    # ------------------------------------------------------------------ hooks

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return options.validate(tool_config, key_path)

    @hookimpl
    def trace_reader(self):
        """Kineto JSON (``rlprof_torch.kineto_reader``): this backend's traces, and vLLM's and SGLang's
        engine traces, which are Kineto too."""
        return TraceReader(patterns=("*.json", "*.json.gz"), target="rlprof_torch.kineto_reader:read_trace",
                           format="Kineto JSON", chrome=True)

    @hookimpl
    def check_environment(self):
        import torch.autograd

        if not torch.autograd.kineto_available():
            return ["this torch build has no Kineto: torch.profiler cannot record traces"]
        return []

    @hookimpl
    def start_step(self, ctx):
        if self._writer is not None and self._writer.has_finished():
            self._list_written(ctx)
        if ctx.opens_capture:
            self._open(ctx)
        if self._session is not None:
            self._session.begin_step(ctx.step)

    @hookimpl
    def start_role(self, ctx):
        if self._writer is not None and self._writer.has_finished():
            self._list_written(ctx)
        if ctx.opens_capture:
            self._open(ctx)
            self._session.begin_step(ctx.step)
        if self._session is not None:
            self._session.saw(ctx.step, ctx.role, ctx.region)
        marker = (self._record_function or self._load_record_function())(ctx.region)
        marker.__enter__()
        self._ranges.append(marker)

    @hookimpl
    def stop_role(self, ctx):
        # Empty only when our own start_role raised before its range began: the core still sends
        # this call when it releases the backend.
        if self._ranges:
            self._ranges.pop().__exit__(None, None, None)
        if ctx.closes_capture:
            self._close(ctx)
        return None

    @hookimpl
    def step_boundary(self, ctx):
        if self._writer is not None and self._writer.has_finished():
            self._list_written(ctx)
        if ctx.closes_capture:
            self._close(ctx)
        elif self._session is not None:
            self._session.end_step()  # the capture goes on over the next step
        return None

    @hookimpl
    def finalize(self, ctx):
        while self._ranges:
            self._ranges.pop().__exit__(None, None, None)
        try:
            self._close(ctx)
        finally:
            try:
                if self._writer is not None:
                    self._finish_writing(ctx)
            finally:
                scratch, self._scratch = self._scratch, None
                if scratch is not None:
                    if self._writer is not None and self._writer.wait(self, 0):
                        self._writer.then(scratch.close)  # traces left unfinished still export from it
                    else:
                        scratch.close()
        return None

    def _load_record_function(self):
        from torch.autograd.profiler import record_function

        self._record_function = record_function
        return record_function

    # ------------------------------------------------------------------ capture windows

    def _open(self, ctx) -> None:
        contents = tuple(ctx.tool_config.get("contents", ()))
        flops = bool(ctx.tool_config.get("flops", False))
        arguments = self._arguments.get((contents, flops))
        if arguments is None:
            import torch

            # An explicit 'cuda' without a device was said once, when the section was validated (options.py).
            arguments = self._arguments[(contents, flops)] = options.profile_arguments(contents, torch.cuda.is_available(),
                                                                                       flops)
        peak = _peak(ctx, arguments) if flops else None
        session = TraceSession(ctx.capture.capture_id, ctx.run, ctx.output_dir(), arguments, peak)  # torch copies them
        session.start()
        self._session = session

    def _close(self, ctx) -> None:
        """Stop the open capture (what must happen on the training thread), hand its export to the
        writer, list it as ``writing``."""
        session, self._session = self._session, None
        if session is None:
            return
        if self._scratch is None:
            self._scratch = ScratchDir(session.directory, session.run.run_dir)
        session.stop()
        # The trace's name is claimed now, so the manifest lists it as it will be: another Profiler of this
        # run and rank in this process (same directory) gets rank<R>.1.pt.trace.json.gz, never this file.
        target = reserve(session.directory / session.trace_name, session.run.run_dir)
        capture = ctx.capture
        belongs = dict(step=capture.steps[0], steps=list(capture.steps), capture=capture.capture_id,
                       region=getattr(ctx, "region", None)) if capture is not None else {}
        if self._writer is None:
            self._writer = process_writer()
        self._writer.submit(Export(self._scratch, session.plain_name, target, belongs, owner=self,
                                          dump=session.export))
        # its size is known once written (the budget waits for it)
        ctx.add_artifact(target.path, "file", state="writing", stop_path=session.stop_path)
        if session.stop_path == nogil.TORCH and mark_said(FALLBACK_SAID):
            ctx.warn(f"captures end with the GIL held (torch's own stop, export and free; every other thread of the "
                     f"process waits meanwhile): {nogil.unavailable() or 'torch did not route its stop'}")

    def _list_written(self, ctx) -> None:
        """List this backend's traces that the writer finished since the last call (see the module docstring).

        :raises TraceNotWritten: one could not be written (a link planted at its name, a full disk):
            the core records the error and releases the backend, as when writing failed in the step."""
        failed = None
        for export in self._writer.finished(self):
            if export.error is None:
                ctx.add_artifact(export.final, "file", state="written", sha256=export.sha256, **export.belongs)
            else:
                problem = f"{type(export.error).__name__}: {export.error}"
                ctx.add_artifact(export.final, "file", state="failed", error=problem, **export.belongs)
                failed = failed or export
        if failed is not None:
            raise TraceNotWritten(f"the trace of capture {failed.belongs.get('capture')} could not be written to "
                                  f"{failed.final}: {failed.error}") from failed.error

    def _finish_writing(self, ctx) -> None:
        """At finalize: wait for this backend's traces still being written (up to the limit), list them."""
        try:
            limit = writer.wait_limit_from_env()
        except ConfigError as exc:
            ctx.warn(f"{exc}; waiting the default {writer.DEFAULT_WAIT_S:.0f} s")
            limit = writer.DEFAULT_WAIT_S
        unfinished = self._writer.wait(self, limit)
        for export in unfinished:
            ctx.warn(f"the trace of capture {export.belongs.get('capture')} was still being written after {limit:g} s "
                     f"({writer.WAIT_ENV}): it is left unfinished (state 'writing' in the manifest); {export.final} "
                     f"appears only if the process lives until it is complete")
        self._list_written(ctx)


def _peak(ctx, arguments) -> dict | None:
    """The peak a FLOP-counting capture's MFU is divided by, written into its trace (:meth:`rlprof.context.RunInfo.peak`:
    measured once per run and host, the first time, before the profiler starts, so no matmul of the calibration
    is in the trace), for the capture's device: the current CUDA device where CUDA is recorded, else the CPU."""
    from torch.profiler import ProfilerActivity

    device = "cpu"
    if ProfilerActivity.CUDA in arguments.get("activities", ()):
        import torch

        device = f"cuda:{torch.cuda.current_device()}"
    try:
        return ctx.run.peak(device).as_dict()
    except Exception as exc:  # the trace is recorded all the same; its rows say the peak is unknown
        log.debug("rlprof: no peak for %s: %s: %s", device, type(exc).__name__, exc)
        return None
