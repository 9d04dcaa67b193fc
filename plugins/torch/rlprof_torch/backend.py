"""The ``torch`` backend: a torch.profiler Chrome trace per capture window, role regions as named ranges.

What the hooks do (the core's capture state machine decides when a capture opens and closes, and
never opens one inside another; this module only follows ``ctx.opens_capture``/``ctx.closes_capture``):

* a hook with ``opens_capture`` starts a :class:`~rlprof_torch.session.TraceSession`; each step
  inside it is marked ``ProfilerStep#<step>`` (from ``start_step``, or from the ``start_role`` that
  opened the capture, to the end of the step or of the capture);
* every ``start_role``/``stop_role`` enters/exits ``record_function(ctx.region)``, so the trace
  shows ``actor_update``, ``ref_compute_log_prob``... as ``user_annotation`` events (the core sends
  ``stop_role`` last-in-first-out, so the open ranges are a plain stack);
* a hook with ``closes_capture`` stops the session and returns ``rank<R>.pt.trace.json.gz``
  (written in ``ctx.output_dir()``), which the core lists in the manifest;
* ``finalize`` closes whatever is still open and removes the private directory torch exported into;
* outside a run, ``trace_reader`` names the Kineto reader the breakdown analysis uses on its traces.
"""

from __future__ import annotations

import logging
from pathlib import Path

from rlprof import hookimpl
from rlprof.hookspecs import TraceReader
from rlprof.layout import ScratchDir

from . import options
from .session import TraceSession

log = logging.getLogger("rlprof.torch")


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

    # ------------------------------------------------------------------ hooks

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return options.validate(tool_config, key_path)

    @hookimpl
    def trace_reader(self):
        """Kineto JSON (``rlprof_torch.kineto_reader``): this backend's traces, and vLLM's and SGLang's
        engine traces, which are Kineto too."""
        return TraceReader(patterns=("*.json", "*.json.gz"), target="rlprof_torch.kineto_reader:read_trace",
                           format="Kineto JSON")

    @hookimpl
    def check_environment(self):
        import torch.autograd

        if not torch.autograd.kineto_available():
            return ["this torch build has no Kineto: torch.profiler cannot record traces"]
        return []

    @hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self._open(ctx)
        if self._session is not None:
            self._session.begin_step(ctx.step)

    @hookimpl
    def start_role(self, ctx):
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
            return self._close()
        return None

    @hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            return self._close()
        if self._session is not None:
            self._session.end_step()  # the capture goes on over the next step
        return None

    @hookimpl
    def finalize(self, ctx):
        while self._ranges:
            self._ranges.pop().__exit__(None, None, None)
        try:
            return self._close()
        finally:
            scratch, self._scratch = self._scratch, None
            if scratch is not None:
                scratch.close()

    def _load_record_function(self):
        from torch.autograd.profiler import record_function

        self._record_function = record_function
        return record_function

    # ------------------------------------------------------------------ capture windows

    def _open(self, ctx) -> None:
        contents = tuple(ctx.tool_config.get("contents", ()))
        arguments = self._arguments.get(contents)
        if arguments is None:
            import torch

            # An explicit 'cuda' without a device was said once, when the section was validated (options.py).
            arguments = self._arguments[contents] = options.profile_arguments(contents, torch.cuda.is_available())
        session = TraceSession(ctx.capture.capture_id, ctx.run, ctx.output_dir(), arguments)  # torch copies them
        session.start()
        self._session = session

    def _close(self) -> Path | None:
        session, self._session = self._session, None
        if session is None:
            return None
        if self._scratch is None:
            self._scratch = ScratchDir(session.directory, session.run.run_dir)
        return session.stop_and_export(self._scratch)
