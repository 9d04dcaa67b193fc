"""The ``walltime`` backend: how long each region took, as a Chrome trace, one file per capture.

Open the files in chrome://tracing or https://ui.perfetto.dev. Each capture window the core opens
becomes ``walltime.json`` in that capture's ``ctx.output_dir()``, holding one complete event
(``"ph": "X"``) per region and per step, and an instant event (``"ph": "i"``) per sampled
iteration boundary (``iteration_boundary``).

It shows every part of the contract a backend has to keep, and nothing else:

* it opens a window only when the core says so (``ctx.opens_capture``) and closes it only when the
  core says so (``ctx.closes_capture``): no rank, step, mode or nesting logic here (the core never
  opens a capture inside another, and closes only what it opened);
* its open ranges are a plain stack: the core ends regions and steps last-in-first-out, so each
  end closes the innermost range (no search by name);
* it marks a range for every region, also when the region raised (``ctx.error``);
* it writes only under ``ctx.output_dir()`` and returns every path it wrote;
* it reports what it still holds open through ``open_captures()`` (the conformance suite asks);
* ``finalize`` writes whatever is still open and is harmless when called twice.

tool_config (``global_tool_config.walltime`` or a role's ``tool_config.walltime``)::

    iterations: true    # mark sampled iteration boundaries as instant events
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import rlprof
from rlprof.errors import fail
from rlprof.backend_api import check_keys

TRACE_FILE = "walltime.json"
OPTIONS = ("iterations",)


def _now_us() -> float:
    """Wall-clock microseconds since the epoch: traces of several ranks line up when merged."""
    return time.time_ns() / 1000


class _Trace:
    """One open capture window: the events so far, and the ranges that have begun but not ended."""

    def __init__(self, opened_by, pid: int):
        self.opened_by = opened_by
        """The context that opened the window; its ``output_dir()`` is where the file goes."""
        self.pid = pid
        self.events: list[dict[str, Any]] = []
        self.running: list[tuple[str, float, dict[str, Any]]] = []
        """Ranges begun and not ended, innermost last: (name, start, event fields)."""

    def begin(self, name: str, category: str, **args: Any) -> None:
        self.running.append((name, _now_us(), {"cat": category, "args": args}))

    def end(self, **args: Any) -> None:
        """End the innermost running range (the one whose region or step is ending)."""
        name, start, event = self.running.pop()
        event["args"].update({k: v for k, v in args.items() if v is not None})
        self.events.append({"name": name, "ph": "X", "ts": start, "dur": _now_us() - start,
                            "pid": self.pid, "tid": 0, **event})

    def instant(self, name: str, **args: Any) -> None:
        self.events.append({"name": name, "ph": "i", "s": "t", "ts": _now_us(), "pid": self.pid, "tid": 0, "args": args})

    def write(self) -> str:
        while self.running:  # only when the process ends inside a range
            self.end(unfinished=True)
        ctx = self.opened_by
        run = ctx.run
        document = {
            "traceEvents": [
                {"name": "process_name", "ph": "M", "pid": self.pid, "args": {"name": f"rank {run.rank} ({run.host}, pid {run.pid})"}},
                *self.events,
            ],
            "displayTimeUnit": "ms",
            "otherData": {"backend": ctx.backend, "run": run.run_id, "rank": run.rank,
                          "capture": ctx.capture.capture_id, "steps": list(ctx.capture.steps)},
        }
        path = ctx.output_dir() / TRACE_FILE
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(document))
        os.replace(partial, path)  # a reader never sees half a trace
        return str(path)


class WalltimeBackend:
    """Instantiated once per Profiler by the core (no arguments); holds one :class:`_Trace` per open window."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""

    def __init__(self) -> None:
        self._traces: dict[str, _Trace] = {}

    # -------------------------------------------------------------- configuration and environment

    @rlprof.hookimpl
    def validate_tool_config(self, tool_config, key_path):
        check_keys(tool_config, key_path, used=OPTIONS)
        iterations = tool_config.get("iterations", True)
        if not isinstance(iterations, bool):
            raise fail(f"{key_path}.iterations", iterations, "true or false")
        return {"iterations": iterations}

    @rlprof.hookimpl
    def check_environment(self):
        return []  # the standard library is all it needs

    # -------------------------------------------------------------- the lifecycle

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self._traces[ctx.capture.capture_id] = _Trace(ctx, ctx.run.pid)
        trace = self._trace_of(ctx)
        if trace is not None:
            trace.begin(f"step {ctx.step}", "step", step=ctx.step)

    @rlprof.hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            self._traces[ctx.capture.capture_id] = _Trace(ctx, ctx.run.pid)
        trace = self._trace_of(ctx)
        if trace is not None:
            trace.begin(ctx.region, ctx.role, step=ctx.step)

    @rlprof.hookimpl
    def stop_role(self, ctx):
        trace = self._trace_of(ctx)
        if trace is not None:
            error = f"{type(ctx.error).__name__}: {ctx.error}" if ctx.error is not None else None
            trace.end(iterations=list(ctx.iterations) if ctx.iterations else None, error=error)
        if ctx.closes_capture:
            return self._close(ctx)
        return None

    @rlprof.hookimpl
    def iteration_boundary(self, ctx):
        trace = self._trace_of(ctx)
        if trace is not None and ctx.tool_config.get("iterations", True):
            trace.instant(f"{ctx.region} iteration {ctx.iteration}", step=ctx.step)

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        trace = self._trace_of(ctx)
        if trace is not None and ctx.ends_step:
            trace.end()
        if ctx.closes_capture:
            return self._close(ctx)
        return None

    @rlprof.hookimpl
    def finalize(self, ctx):
        # The core closes every window before finalize; a window still open here means a hook of
        # ours failed half-way. Write what we have rather than lose it. A second call finds nothing.
        written = [trace.write() for trace in self._traces.values()]
        self._traces.clear()
        return written

    # -------------------------------------------------------------- the leak report (optional protocol)

    def open_captures(self) -> list[str]:
        """Capture ids opened and not written yet (asked by rlprof's conformance suite)."""
        return list(self._traces)

    # -------------------------------------------------------------- helpers

    def _trace_of(self, ctx) -> _Trace | None:
        return self._traces.get(ctx.capture.capture_id) if ctx.capture is not None else None

    def _close(self, ctx) -> list[str]:
        trace = self._traces.pop(ctx.capture.capture_id, None)
        return [trace.write()] if trace is not None else []
