"""The rollout backend's place in a replica's session: the engine's profiler stands in for ``torch``/``npu``.

A replica process never runs torch.profiler beside its inference engine's own. Its
:class:`~rlprof.Profiler` is built with ``backends=engine_backends(config)``: the first of the
selected tools an engine can stand in for is an :class:`EngineStandIn`, which hands the capture's
open and close to the replica's :class:`~rlprof.integrations.engines.replica.EngineReplica`; every
other tool is :class:`Inert` there (silent, or saying once why it captures nothing).
"""

from __future__ import annotations

from typing import Any, Mapping

from rlprof.config.sections import ENGINE_TOOLS, not_captured_reason
from rlprof.hookspecs import hookimpl


class EngineStandIn:
    """The rollout backend's place in a replica's session (``torch``/``npu``): the engine captures.

    It validates its section as the real backend would (the same keys, the same errors), and hands the
    capture's open and close to its :class:`EngineReplica`. It never imports torch's profiler."""

    rlprof_contract = 1

    def __init__(self, tool: str):
        self.tool = tool
        self.participant: Any = None
        """The replica's :class:`~rlprof.integrations.engines.replica.EngineReplica`, once it found this stand-in."""

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        from rlprof.runtime.registry import load_backend

        real = load_backend(self.tool)
        check = getattr(real, "validate_tool_config", None)
        return check(tool_config, key_path) if check is not None else dict(tool_config)

    @hookimpl
    def start_step(self, ctx):
        if self.participant is not None:
            self.participant.plain_traces.list_written(ctx)
            if ctx.opens_capture:  # end-to-end rollout: the step is the call
                self.participant._opened(ctx)

    @hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture and self.participant is not None:
            self.participant._opened(ctx)

    @hookimpl
    def stop_role(self, ctx):
        if ctx.closes_capture and self.participant is not None:
            self.participant._closed(ctx)

    @hookimpl
    def step_boundary(self, ctx):
        if self.participant is not None:
            if ctx.closes_capture:
                self.participant._closed(ctx)
            self.participant.plain_traces.list_written(ctx)

    @hookimpl
    def finalize(self, ctx):
        """Wait for the engine traces still being compressed (bounded), list them."""
        if self.participant is not None:
            self.participant.plain_traces.finish(ctx)


class Inert:
    """A selected tool that does not run in a replica process. Beside an engine that captures (``torch_memory``
    beside ``torch``...) it is silent: the engine's capture is the replica's output. Where it is the only
    kind of tool (``nsys``: no engine can stand in for it), ``reason`` says why each capture it would
    open writes nothing, once per replica (a ``skip`` record); the session still times the regions."""

    rlprof_contract = 1

    def __init__(self, reason: str | None = None):
        self.reason = reason

    @hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture and self.reason:
            ctx.skip(self.reason)

    @hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture and self.reason:
            ctx.skip(self.reason)


def engine_captures(config: Any) -> bool:
    """One of the selected tools is one an engine's profiler can stand in for (:data:`ENGINE_TOOLS`)."""
    return any(t in ENGINE_TOOLS for t in config.global_.tools)


def engine_backends(config: Any) -> Mapping[str, Any]:
    """``{tool: instance}`` for a replica's :class:`~rlprof.Profiler` (its ``backends=`` argument): the
    first of ``torch``/``npu`` among the selected tools is an :class:`EngineStandIn`; other tools do not
    run in a replica process (their work there is the engine's). With neither ``torch`` nor ``npu``
    selected, nothing captures in the replica: each tool says why (:func:`not_captured_reason`), and the
    replica's ``rollout_generate`` is timed all the same (region timing is the core's, not a backend's)."""
    tools = config.global_.tools
    first = next((t for t in tools if t in ENGINE_TOOLS), None)
    if first is None:
        return {t: Inert(not_captured_reason(t)) for t in tools}
    return {t: EngineStandIn(t) if t == first else Inert() for t in tools}
