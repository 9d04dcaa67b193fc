"""A backend that records every hook call it receives, for tests of the core and of trainers.

It captures nothing real: on each capture close it writes a small JSON file listing the calls of
that capture, so tests can assert both the hook sequence and the manifest/layout behaviour.
With ``write_captures=False`` it writes nothing, and says so with ``ctx.skip`` on each capture it
closes (so a report does not count its captures as missing): the conformance suite runs one beside
the backend under test to know which capture windows the core opened and closed (:attr:`captures`),
without adding files of its own.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, Callable

from rlprof import hookspecs
from rlprof.hookspecs import hookimpl


SKIP_REASON = "the testing kit's recorder only watches the hook calls; it writes no files"


def hook_function(hook: str, body: Callable[..., Any]) -> Callable[..., Any]:
    """A hookimpl of ``hook`` that takes exactly the arguments the spec names, in the spec's order, and
    returns ``body(*arguments)``: set on an *instance* (``setattr(obj, hook, hook_function(...))``), it makes
    that object implement a hook its class does not write, whatever the hook takes. pluggy reads an
    implementation's arguments from its code, following ``__wrapped__`` (here: the spec itself), so
    the kit needs no code per hook (the conformance suite's stand-ins are built with it)."""
    spec = getattr(hookspecs, hook)
    names = tuple(inspect.signature(spec).parameters)

    def implementation(*arguments: Any, **by_name: Any) -> Any:  # pluggy passes them by position, rlprof by name
        given = {**dict(zip(names, arguments)), **by_name}
        return body(*(given[name] for name in names))

    implementation.__wrapped__ = spec  # type: ignore[attr-defined]
    implementation.__name__ = implementation.__qualname__ = hook
    return hookimpl(implementation)


class RecordingBackend:
    """Records ``(hook, fields)`` tuples in :attr:`calls`; writes ``<capture>.json`` per capture.

    :attr:`captures` maps each capture id the core opened to how it was opened and closed
    (``opened_by``, ``closed_by``, ``steps``, ``error`` of the region that closed it).
    """

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for."""

    def __init__(self, write_captures: bool = True) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.captures: dict[str, dict[str, Any]] = {}
        self.write_captures = write_captures
        self._open: dict[str, list] = {}

    def open_captures(self) -> list[str]:
        """Capture ids opened and not closed yet: the optional leak-report protocol of the
        conformance suite (see docs/writing-a-backend.md)."""
        return list(self._open)

    def _opened(self, hook: str, ctx) -> None:
        capture = ctx.capture
        self._open[capture.capture_id] = []
        self.captures[capture.capture_id] = {"opened_by": hook, "closed_by": None, "steps": list(capture.steps), "error": None}

    def _note(self, hook: str, ctx, **fields: Any) -> None:
        entry = {"step": getattr(ctx, "step", None), **fields}
        self.calls.append((hook, entry))
        if ctx.capture is not None and ctx.capture.capture_id in self._open:
            self._open[ctx.capture.capture_id].append((hook, entry))

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return dict(tool_config)

    @hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self._opened("start_step", ctx)
        self._note("start_step", ctx, opens=ctx.opens_capture)

    @hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            self._opened("start_role", ctx)
        self._note("start_role", ctx, region=ctx.region, opens=ctx.opens_capture, iterations=ctx.iterations)

    @hookimpl
    def stop_role(self, ctx):
        self._note("stop_role", ctx, region=ctx.region, closes=ctx.closes_capture, iterations=ctx.iterations,
                   error=type(ctx.error).__name__ if ctx.error else None)
        if ctx.closes_capture:
            return self._close("stop_role", ctx)

    @hookimpl
    def iteration_boundary(self, ctx):
        self._note("iteration_boundary", ctx, region=ctx.region, iteration=ctx.iteration)

    @hookimpl
    def step_boundary(self, ctx):
        self._note("step_boundary", ctx, closes=ctx.closes_capture, late=not ctx.ends_step)
        if ctx.closes_capture:
            return self._close("step_boundary", ctx)

    @hookimpl
    def finalize(self, ctx):
        self.calls.append(("finalize", {"reason": ctx.reason, "steps": list(ctx.profiled_steps)}))
        # What is still open here was left by a hook of ours that failed half-way (the core closes
        # every capture before finalize): write it rather than lose it, as a real backend should.
        written = []
        for capture_id in list(self._open):
            written.extend(self._write(capture_id, ctx) or [])
        return written or None

    def _close(self, hook: str, ctx):
        capture_id = ctx.capture.capture_id
        if capture_id in self.captures:
            error = getattr(ctx, "error", None)
            self.captures[capture_id].update(closed_by=hook, error=type(error).__name__ if error else None)
        return self._write(capture_id, ctx)

    def _write(self, capture_id: str, ctx):
        calls = self._open.pop(capture_id, [])
        if not self.write_captures:
            if ctx.capture is not None:
                ctx.skip(SKIP_REASON)
            return None
        directory = ctx.capture.directory if ctx.capture is not None and ctx.capture.capture_id == capture_id else None
        if directory is None:  # finalize: the capture's own directory, as the core laid it out
            directory = ctx.run.run_dir / capture_id / f"rank{ctx.run.rank}-{ctx.run.host}-{ctx.run.pid}"
        path = directory / ctx.backend / "calls.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"capture": capture_id, "calls": calls}))
        return [path]

    def sequence(self) -> list[str]:
        """Compact view: ``start_step:1+``, ``start_role:actor_update+``, ``iteration_boundary:actor_update#1``,
        ``stop_role:actor_update-``, ``step_boundary:3-(late)``... (``+`` opens a capture, ``-`` closes one,
        ``(late)``: a close after the step already ended)."""
        out = []
        for hook, f in self.calls:
            label = f.get("region") or f.get("step")
            if f.get("iteration") is not None:
                label = f"{label}#{f['iteration']}"
            mark = "+" if f.get("opens") else "-" if f.get("closes") else ""
            late = "(late)" if f.get("late") else ""
            out.append(f"{hook}:{label}{mark}{late}")
        return out

