"""An engine's plain JSON traces, compressed off the engine by the process's background writer.

vLLM's own gzip export (``torch_profiler_use_gzip``, its default) is torch's: a temporary file recompressed
line by line at level 9, inside the engine's busy loop, seconds per capture during which the engine
generates nothing (bench/bench_vllm_stop.py: 16.8 s of a 15k-event capture's ``stop_profile()``, 1.1 s
with plain JSON). So the vLLM adapter asks for plain JSON, and the replica hands each ``*.json`` trace the
engine wrote to :class:`PlainTraces`: its final name ``<name>.gz`` is claimed at once and listed
``state: "writing"``; the background writer (:mod:`rlprof.runtime.trace_writer`, the torch backend's)
gzips it there (level 6), hashes and places it, and removes the plain file; the replica's next hook lists
it ``written`` (or ``failed``); the end of the run waits for what is still being compressed. Users get the
``.pt.trace.json.gz`` the engine's own export would have written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PLAIN_TRACE = ".json"
"""How a plain JSON trace an engine wrote ends (vLLM with ``torch_profiler_use_gzip=False``, what its
adapter asks for): compressed into ``<name>.gz``."""


class PlainTraces:
    """One replica's engine traces on the background writer (one per :class:`EngineReplica`; it is the
    writer's ``owner`` of them, so only this replica lists them)."""

    def __init__(self, profiler: Any, engine: str, replica_rank: int, wait_s: float):
        self.profiler, self.engine, self.replica_rank, self.wait_s = profiler, engine, replica_rank, wait_s
        self._writer: Any = None
        """The process's background writer, from this replica's first plain trace on."""

    def hand_over(self, source: Path, target: Path, root: Path, ctx: Any, **fields: Any) -> Path | None:
        """Claim ``target`` (or its first free numbered name), hand ``source`` to the background writer to be
        compressed into it, list it ``writing``; where it will be. None when the name cannot be claimed (a
        link in the way: said with ``ctx.warn``): the caller then moves the plain file as it is."""
        from rlprof.layout import reserve
        from rlprof.runtime import trace_writer

        try:
            reserved = reserve(target, root)
        except Exception as exc:
            ctx.warn(f"could not claim {target} for the engine's trace ({type(exc).__name__}: {exc}); its plain JSON "
                     "is kept as it is")
            return None
        capture = ctx.capture
        belongs = dict(step=capture.steps[0], steps=list(capture.steps), capture=capture.capture_id,
                       region=getattr(ctx, "region", None), **fields) if capture is not None else dict(fields)
        if self._writer is None:
            self._writer = trace_writer.process_writer()
        self._writer.submit(trace_writer.Export(trace_writer.Folder(source.parent), source.name, reserved, belongs,
                                                owner=self))
        ctx.add_artifact(reserved.path, "trace", state="writing", **fields)
        return reserved.path

    def list_written(self, ctx: Any) -> None:
        """List the traces the writer finished since the last call (the stand-in's hooks ask): ``state:
        "written"`` with size and sha256, or ``"failed"`` with the error (the plain JSON the engine wrote is
        gone then too: an ``error`` record says so)."""
        writer = self._writer
        if writer is None or not writer.has_finished():
            return
        for export in writer.finished(self):
            if export.error is None:
                ctx.add_artifact(export.final, "trace", state="written", sha256=export.sha256, **export.belongs)
                continue
            problem = f"{type(export.error).__name__}: {export.error}"
            ctx.add_artifact(export.final, "trace", state="failed", error=problem, **export.belongs)
            self.profiler.record_error(self.engine, "written", f"rollout replica {self.replica_rank}: the engine's "
                                       f"trace could not be compressed into {export.final}: {problem}",
                                       kind="engine", replica_rank=self.replica_rank, step=export.belongs.get("step"))

    def finish(self, ctx: Any) -> None:
        """At the end (the stand-in's ``finalize``): wait for the traces still being compressed (at most
        ``wait_s``), list them; one still unfinished stays ``writing`` and is named in a warning."""
        writer = self._writer
        if writer is None:
            return
        for export in writer.wait(self, self.wait_s):
            ctx.warn(f"the engine trace {export.final} was still being compressed after {self.wait_s:g} s: left "
                     "unfinished (state 'writing' in the manifest); it appears only if the process lives until it is "
                     "complete")
        self.list_written(ctx)
