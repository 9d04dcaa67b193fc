"""The records a profiling process writes, built from what the session knows: steps, regions, artifacts, notes,
errors, waits, the process record, a released backend's cleanup.

The dict-record builders return a record's fields (``ManifestWriter.write(type, **fields)``); those whose type
is declared (:mod:`rlprof.manifest.records`) build the declaration and return its fields.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from rlprof.context import context_field
from rlprof.layout import relative
from rlprof.manifest.reading import WRITING
from rlprof.manifest.records import PhaseRecord, ProcessRecord, UnprofiledStepsRecord, record_fields
from rlprof.manifest.writer import path_size


def describe_error(exc: BaseException | None) -> str | None:
    """``"ValueError: message"``, the form every record uses for an exception."""
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def step_record(step: int, start_ns: int, end_ns: int, closed_ns: int | None = None) -> dict[str, Any]:
    """``closed_ns``: when the captures the step closed were written (after ``end_ns``): the time
    profiling itself took at the step's end, which the report shows apart from the step's own work."""
    record = {"step": step, "start_ns": start_ns, "end_ns": end_ns, "duration_ms": round((end_ns - start_ns) / 1e6, 6)}
    if closed_ns is not None:
        record["closed_ns"] = closed_ns
    return record


def phase_record(step: int, name: str, start_ns: int, end_ns: int, source: str) -> dict[str, Any]:
    """The ``phase`` record (:class:`PhaseRecord`) of the driver's phase ``name`` of ``step`` (``time.time_ns()`` bounds)."""
    return record_fields(PhaseRecord(step=step, name=name, source=source, start_ns=start_ns, end_ns=end_ns,
                                     duration_ms=round((end_ns - start_ns) / 1e6, 6)))


def plain_steps_record(steps: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The ``unprofiled_steps`` record (:class:`UnprofiledStepsRecord`) of ``(step, start_ns, end_ns)`` triples."""
    numbers, starts, ends = zip(*steps)
    return record_fields(UnprofiledStepsRecord(steps=list(numbers), start_ns=list(starts), end_ns=list(ends)))


def region_record(region: Any) -> dict[str, Any]:
    """The ``region`` record of a closed :class:`rlprof.runtime.capture_state.OpenRegion`."""
    parent = region.parent
    return {
        "step": region.step, "role": region.role, "region": region.name,
        "parent": parent.name if parent is not None else None, "depth": region.depth,
        "capture": region.capture, "start_ns": region.start_ns, "end_ns": region.end_ns, "closed_ns": region.closed_ns,
        "duration_ms": round((region.end_ns - region.start_ns) / 1e6, 6),
        "iterations": list(region.sampled) if region.sampled is not None else None,
        "marked_iterations": region.marked, "error": describe_error(region.error),
    }


def wait_record(source: str, start_ns: int, end_ns: int, **details: Any) -> dict[str, Any]:
    """The ``profiling_wait`` record of a wait from ``start_ns`` to ``end_ns`` (``time.time_ns()``)."""
    return {"source": source, "start_ns": start_ns, "end_ns": end_ns, "ms": round((end_ns - start_ns) / 1e6, 3),
            **details}


def error_record(backend: str | None, hook: str | None, kind: str, error: str, **details: Any) -> dict[str, Any]:
    return {"kind": kind, "backend": backend, "hook": hook, "error": error, **details}


def artifact_record(backend: str, ctx: Any, path: os.PathLike | str, kind: str, extra: dict[str, Any], *, run_dir: Path,
                    world_size: int, mode: str, selected_roles: Iterable[str]) -> dict[str, Any]:
    """One artifact; what the file belongs to comes from the call's context (its capture's steps,
    else its step; its role, else the process's selected roles), unless ``extra`` names it."""
    capture = ctx.capture
    step = context_field(ctx, "step")
    steps = list(capture.steps) if capture else ([step] if step is not None else [])
    role = context_field(ctx, "role")
    iterations = context_field(ctx, "iterations")
    shown, within = _in_run(path, run_dir)
    entry = {
        "backend": backend,
        "step": steps[0] if steps else None,
        "steps": steps,
        "roles": [role] if role else list(selected_roles),
        "region": context_field(ctx, "region"),
        "capture": capture.capture_id if capture else None,
        "mode": mode,
        "iterations": list(iterations) if iterations else None,
        "world_size": world_size,
        "path": shown,
        "size": 0 if extra.get("state") == WRITING else path_size(path),  # not on disk yet: no stat on the step
        "kind": kind,
        "outside_output_dir": not within,
        **extra,
    }
    if "step" in extra and "steps" not in extra:
        entry["steps"] = [] if extra["step"] is None else [extra["step"]]  # a backend naming its own step
    return entry


def note_records(backend: str, hook: str, ctx: Any, selected_roles: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """The ``warning`` and ``skip`` records of what a backend said during one call (``ctx.warn``,
    ``ctx.skip``), tied to the call's step, capture and region like its artifacts."""
    capture = ctx.capture
    step = getattr(ctx, "step", None)
    role = getattr(ctx, "role", None)
    where = {"step": step if step is not None else (capture.steps[0] if capture else None),
             "steps": list(capture.steps) if capture else ([step] if step is not None else []),
             "roles": [role] if role else list(selected_roles), "region": getattr(ctx, "region", None),
             "capture": capture.capture_id if capture else None}
    records = []
    for record_type, text in ctx._notes or ():
        if record_type == "warning":
            records.append(("warning", {"kind": "backend", "backend": backend, "hook": hook, "message": text, **where}))
        else:
            records.append(("skip", {"backend": backend, "hook": hook, "reason": text, **where}))
    return records


def _in_run(path: os.PathLike | str, run_dir: Path) -> tuple[str, bool]:
    """``path`` as an artifact record names it (relative to the run directory) and whether it lies
    under the run directory. Lexical, no file-system calls: this runs for every artifact. A relative
    ``path`` is taken from the working directory, as the backend meant it."""
    text, root = os.path.abspath(path), os.path.abspath(run_dir)
    if text.startswith(root + os.sep):
        return text[len(root) + 1:], True
    return relative(text, run_dir), text == root


def process_record(prof: Any, environment: dict[str, list[str]]) -> ProcessRecord:
    """The ``process`` record of one Profiler (a participant of the process session)."""
    from dataclasses import asdict

    plan, run = prof.plan, prof.run
    return ProcessRecord(
        world_size=run.world_size, roles=list(run.roles), selected_roles=list(plan.selected_roles),
        steps=list(plan.steps), mode="discrete" if plan.discrete else "e2e", tools=list(plan.tools),
        save_path=str(run.run_dir.parent), replica_rank=run.replica_rank,
        expected_captures=plan.expected_captures(prof.stages),
        schedules={n: asdict(p.schedule) for n, p in plan.roles.items() if p.schedule},
        environment=environment, global_profiler=prof.config.recorded(),
    )


def cleanup_fields(backend: str, closed: list[str], finalized: bool, problems: list[str]) -> dict[str, Any]:
    """The ``cleanup`` record of a backend the core released after it raised."""
    return {"backend": backend, "closed": closed, "finalized": finalized, "errors": problems}
