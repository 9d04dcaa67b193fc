"""What a process session's backends produce, and the manifest records it becomes (:class:`SessionRecords`)."""

from __future__ import annotations

import logging
import os
from typing import Any

from rlprof.manifest import (CaptureRecord, artifact_record, cleanup_fields, describe_error, error_record, note_records,
                             plain_steps_record, record_fields, region_record, wait_record)
from rlprof.runtime.capture_state import OpenCapture

log = logging.getLogger("rlprof")

class SessionRecords:
    """What the backends of a :class:`~rlprof.runtime.session.ProcessSession` produce, and the records it becomes:
    the artifacts a call returned or added (listed, measured by the budget, offered to the in-run analysis),
    what a backend said, contained failures, waits, a released backend's cleanup, and the step's buffered timing
    and ``capture`` records written in one go. A part of the session's class: it uses the session's ``lock``,
    ``run``, ``plan``, ``backends``, ``machine``, ``budget``, ``splits`` and ``_members``, and owns ``manifest``'s
    writing of ``artifacts``, ``errors`` and the buffers ``_closed``, ``_sized``, ``_plain_steps``, ``_held``."""

    def _release(self, backend: str) -> None:
        """Release a backend right after its first failure (the machine's state is the one of the call
        that failed): close what it had open, innermost first, then call its ``finalize`` once; record a
        ``cleanup``. A backend that failed in ``finalize`` itself was already finalized once."""
        backends = self.backends
        if backends.failed.get(backend) == "finalize":
            return
        errors_before = len(self.errors)
        closed = []
        for action in self.machine.release_actions():
            if action.hook == "stop_role":
                backends.stop_role(action.region, action.step, action.capture, action.closes, action.iterations,
                                   action.error, backend)
            else:
                backends.step_boundary(action.step, action.capture, action.closes, action.ends_step, backend)
            if action.closes and action.capture is not None:
                closed.append(action.capture.capture_id)
        finalize_errors = len(self.errors)
        backends.finalize("released", tuple(self.profiled_steps), self.config.global_.relocate_results, backend)
        finalized = len(self.errors) == finalize_errors
        problems = [e["error"] for e in self.errors[errors_before:]]
        log.warning("rlprof: backend %r released after it failed: closed %s, finalize %s", backend,
                    ", ".join(closed) or "nothing", "ran" if finalized else "raised")
        self.manifest.write("cleanup", **cleanup_fields(backend, closed, finalized, problems))

    def _collect(self, backend: str, hook: str, ctx: Any, result: Any) -> None:
        """List what a call produced; a result that is not a path (or list of paths) is an ``error``
        record of kind ``return``, never an exception in training."""
        produced = list(ctx._artifacts or ())
        if result is not None:
            paths = _paths(result)
            if paths is None:
                message = (f"{hook} returned {result!r} ({type(result).__name__}); a hook returns None, a path "
                           "(str or os.PathLike) or a list of paths")
                log.error("rlprof: backend %r on rank %d: %s", backend, self.run.rank, message)
                self._record_error(error_record(backend, hook, "return", message))
            else:
                produced.extend((p, "file", {}) for p in paths)
        selected = tuple(dict.fromkeys(r for p in self._members for r in p.plan.selected_roles)) or self.plan.selected_roles
        for path, kind, extra in produced:
            entry = artifact_record(backend, ctx, path, kind, extra, run_dir=self.run.run_dir,
                                    world_size=self.run.world_size, mode="discrete" if self.plan.discrete else "e2e",
                                    selected_roles=selected)
            self.artifacts.append(entry)
            if self._held is not None:
                self._held.append(("artifact", entry))
            else:
                self.manifest.write("artifact", **entry)
            self.budget.add_artifact(entry)
            if self.splits is not None and backend in self._readers:  # a backend that writes traces it reads
                self.splits.offer(path, entry)
        if ctx._notes:  # what the backend said (ctx.warn, ctx.skip)
            self.manifest.write_many(note_records(backend, hook, ctx, selected))

    def _hook_failed(self, backend: str, hook: str, exc: BaseException, kind: str) -> None:
        self._record_error(error_record(backend, hook, kind, describe_error(exc)))

    def _timed_out(self, backend: str, hook: str, rank: int, elapsed_s: float, stack: str) -> None:
        """The watchdog's report (from its own thread, while training waits for the hook): never takes the lock."""
        log.error("rlprof: backend %r has been running %s for %.1f s on rank %d (RLPROF_HOOK_TIMEOUT_S); training "
                  "waits for it. Its stack:\n%s", backend, hook, elapsed_s, rank, stack)
        self._record_error(error_record(backend, hook, "timeout", f"{hook} still running after {elapsed_s:.1f} s",
                                        elapsed_s=round(elapsed_s, 3), stack=stack))

    def record_error(self, source: str | None, hook: str | None, kind: str, error: str, **details: Any) -> None:
        """Record a contained failure that did not happen inside a hook call (a rollout engine that could
        not start its profiler, or died): an ``error`` record the report and the verdict show."""
        with self.lock:
            self._record_error(error_record(source, hook, kind, error, **details))

    def record_warning(self, source: str, message: str, **details: Any) -> None:
        """Record a warning about something rlprof drives outside the hooks (an engine setting it cannot
        honour): a ``warning`` record of kind ``backend``, shown by the report and the verdict."""
        with self.lock:
            self.manifest.write("warning", kind="backend", backend=source, message=message, **details)

    def record_wait(self, source: str, start_ns: int, end_ns: int, **details: Any) -> None:
        """Record a wait of training on profiling outside the hooks: a ``profiling_wait`` record."""
        with self.lock:
            self.manifest.write("profiling_wait", **wait_record(source, start_ns, end_ns, **details))

    def _record_error(self, entry: dict[str, Any]) -> None:
        self.errors.append(entry)
        self.manifest.write("error", **entry)

    def _flush_regions(self, *first: tuple[str, dict[str, Any]]) -> None:
        """Write the buffered timing records (after ``first``) in one go."""
        closed, self._closed = self._closed, []
        sized, self._sized = self._sized, []
        plain, self._plain_steps = self._plain_steps, []
        if plain:
            first = (("unprofiled_steps", plain_steps_record(plain)), *first)
        self.manifest.write_many([*first, *sized, *(("region", region_record(region)) for region in closed)])

    def _capture_closed(self, opened: OpenCapture) -> None:
        """A capture closed: the bytes its artifacts measured, as a ``capture`` record (step, roles, region,
        bytes), written with the step's timing records; the budget counts them."""
        capture = opened.capture
        if opened.region is not None:
            roles, region = (opened.region.role,), opened.region.name
        else:
            roles = tuple(dict.fromkeys(r for p in self._members for r in p.plan.selected_roles)) or self.plan.selected_roles
            region = None
        size = self.budget.closed(capture.capture_id, roles)
        step = capture.steps[0] if capture.steps else None
        record = CaptureRecord(capture=capture.capture_id, step=step, steps=list(capture.steps), roles=list(roles),
                               region=region, bytes=size, reason=self.unplanned.get(step, "planned"))
        self._sized.append((record.TYPE, record_fields(record)))


def _paths(result: Any) -> list[Any] | None:
    """The paths a hook returned, or None when it returned something else."""
    if isinstance(result, (str, os.PathLike)):
        return [result]
    if isinstance(result, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in result):
        return list(result)
    return None
