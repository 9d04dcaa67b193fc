"""The records a profiling process writes, built from what the session knows: steps, regions, artifacts, notes,
errors, waits, a released backend's cleanup. Each takes plain values (the ``process`` record is a
:class:`~rlprof.manifest.records.ProcessRecord` its session fills in).

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
from rlprof.manifest.records import PhaseRecord, UnprofiledStepsRecord, record_fields
from rlprof.manifest.writer import path_size


def describe_error(exc: BaseException | None) -> str | None:
    """``"ValueError: message"``, the form every record uses for an exception."""
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def step_record(step: int, start_ns: int, end_ns: int, closed_ns: int | None = None,
                opened_ns: int | None = None) -> dict[str, Any]:
    """``closed_ns``: when the captures the step closed were written (after ``end_ns``): the time
    profiling itself took at the step's end, which the report shows apart from the step's own work.
    ``opened_ns``: when the step began, before its captures opened (before ``start_ns``): profiling's own time
    at the step's start (a first torch.profiler start takes a second on a CPU)."""
    record = {"step": step, "start_ns": start_ns, "end_ns": end_ns, "duration_ms": round((end_ns - start_ns) / 1e6, 6)}
    if closed_ns is not None:
        record["closed_ns"] = closed_ns
    if opened_ns is not None and 0 < opened_ns < start_ns:
        record["opened_ns"] = opened_ns
    return record


def phase_record(step: int, name: str, start_ns: int, end_ns: int, source: str) -> dict[str, Any]:
    """The ``phase`` record (:class:`PhaseRecord`) of the driver's phase ``name`` of ``step`` (``time.time_ns()`` bounds)."""
    return record_fields(PhaseRecord(step=step, name=name, source=source, start_ns=start_ns, end_ns=end_ns,
                                     duration_ms=round((end_ns - start_ns) / 1e6, 6)))


def plain_steps_record(steps: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The ``unprofiled_steps`` record (:class:`UnprofiledStepsRecord`) of ``(step, start_ns, end_ns)`` triples."""
    numbers, starts, ends = zip(*steps)
    return record_fields(UnprofiledStepsRecord(steps=list(numbers), start_ns=list(starts), end_ns=list(ends)))


def region_record(*, step: int | None, role: str, name: str, parent: str | None, depth: int, capture: str | None,
                  start_ns: int, end_ns: int, closed_ns: int, sampled: list[int] | None, marked: int,
                  error: BaseException | None) -> dict[str, Any]:
    """The ``region`` record of a closed region (:meth:`rlprof.runtime.capture_state.OpenRegion.record` passes
    its values): ``parent`` the enclosing region's name, ``sampled`` ``[first, last]`` iteration captured."""
    return {
        "step": step, "role": role, "region": name, "parent": parent, "depth": depth,
        "capture": capture, "start_ns": start_ns, "end_ns": end_ns, "closed_ns": closed_ns,
        "duration_ms": round((end_ns - start_ns) / 1e6, 6),
        "iterations": list(sampled) if sampled is not None else None,
        "marked_iterations": marked, "error": describe_error(error),
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


def cleanup_fields(backend: str, closed: list[str], finalized: bool, problems: list[str]) -> dict[str, Any]:
    """The ``cleanup`` record of a backend the core released after it raised."""
    return {"backend": backend, "closed": closed, "finalized": finalized, "errors": problems}
