"""Moving nsys reports out of Ray's nsight directory into the run's layout, at finalize and later.

Ray writes every worker's reports to one fixed directory per node; ``relocate_results: true`` asks
for them next to everything else of the run. The difficulty is timing: nsys writes a report after
its window closed, in its own process, often only when the worker exits, i.e. *after* rlprof's
finalize. So relocation happens in two places, with one rule: **nothing is lost, nothing is
overwritten**.

At finalize (:func:`relocate_at_finalize`), for this process's pid only:

* each report already complete is moved to the folder of the capture it belongs to (report ``k``
  is the k-th window: ``<run>/<capture>/rank<R>-<host>-<pid>/nsys/``), or to the process folder
  when it matches no window, and listed in the manifest (kind ``file``, ``relocated_from``);
* each report still being written, and, when the process runs under nsys, each window whose
  report does not exist yet, is listed as kind ``pending``: ``source`` is where nsys writes it,
  ``relocate_to`` where it belongs (relative to the run directory), ``reason`` why it waits.

Later, :func:`relocate_pending` (``python -m rlprof_nsys relocate <save_path or run dir>``, run on
each node once the workers have exited) moves every pending report of its host that is now
complete and appends an ``artifact`` record (kind ``file``, ``relocated_from``) to the manifest of
the process that expected it. Other hosts' records are left to those hosts; running it again is
harmless. A destination that already exists is never replaced: the report stays where nsys put it
and the record says so.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from .reports import SETTLE_SECONDS, is_complete, reports_of, running_under_nsys
from .windows import PROCESS_WINDOWS, Window

log = logging.getLogger("rlprof")

PENDING = "pending"


def relocate_at_finalize(ctx, windows: Sequence[Window], *, settle_seconds: float = SETTLE_SECONDS) -> None:
    """Move this process's finished reports into the run layout; list the others as pending.
    Everything is reported through ``ctx.add_artifact`` (the core writes the manifest)."""
    files = reports_of(ctx.run.pid, ctx.tool_config)
    present = files.existing()
    by_index = {w.index: w for w in windows}
    if None in present and 1 not in present and len(windows) == 1:
        present[1] = present.pop(None)  # a single-range capture writes no ".1"
    expected = {w.index for w in windows if w.started} if running_under_nsys() else set()
    for index in sorted(set(present) | expected, key=lambda i: (i is None, i or 0)):
        window = by_index.get(index)
        if window is None and index is not None and PROCESS_WINDOWS.opened_here(index):
            continue  # another Profiler of this process opened that window: its report is that one's to move
        source = present.get(index, files.path(index))
        target = (window.directory if window else ctx.output_dir()) / source.name
        fields = _window_fields(window, ctx.run.run_dir, target)
        if index not in present:
            ctx.add_artifact(source, kind=PENDING, source=str(source),
                             reason="not written yet (nsys writes reports after the window, often at process exit)", **fields)
        elif not is_complete(source, settle_seconds):
            ctx.add_artifact(source, kind=PENDING, source=str(source), reason="being written by nsys", **fields)
        else:
            try:
                move_without_overwrite(source, target)
            except FileExistsError:
                log.warning("rlprof nsys: %s already exists; %s is left where nsys wrote it", target, source)
                ctx.add_artifact(source, kind=PENDING, source=str(source), reason=f"destination exists: {target}", **fields)
            else:
                ctx.add_artifact(target, kind="file", relocated_from=str(source), **_without(fields, "relocate_to"))
    if expected - set(present):
        log.info(
            "rlprof nsys: %d report(s) of process %d are not written yet; after the workers exit run "
            "`python -m rlprof_nsys relocate %s` on this node to move them", len(expected - set(present)), ctx.run.pid, ctx.run.run_dir,
        )


def _window_fields(window: Window | None, run_dir: Path, target: Path) -> dict[str, Any]:
    fields: dict[str, Any] = {"relocate_to": os.path.relpath(target, run_dir), "window": window.index if window else None}
    if window is not None:
        fields.update(capture=window.capture_id, step=window.step, region=window.region)
    return fields


def _without(fields: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if k not in names}


def move_without_overwrite(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``; :class:`FileExistsError` (and nothing moved) when ``target`` exists.

    A hard link claims the name atomically, so a file appearing at ``target`` meanwhile is never
    replaced; across filesystems the copy is made beside the target and linked into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except OSError:
        partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
        shutil.copy2(source, partial)
        try:
            _claim(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    os.unlink(source)


def _claim(partial: Path, target: Path) -> None:
    try:
        os.link(partial, target)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: check, then rename
        if target.exists():
            raise FileExistsError(target)
        os.rename(partial, target)


# ---------------------------------------------------------------------------------- later


@dataclass(frozen=True)
class Outcome:
    """What :func:`relocate_pending` did with one pending report."""

    source: str
    target: str
    status: str
    """``moved``; ``done`` (moved earlier); ``waiting`` (not written or still being written);
    ``exists`` (target taken, left in place); ``other-host`` (listed by a process on another node)."""


def relocate_pending(paths: Path | str | Iterable[Path | str], *, settle_seconds: float = SETTLE_SECONDS,
                     host: str | None = None) -> list[Outcome]:
    """Move every pending nsys report listed in the manifests under ``paths`` (run directories or
    save paths) that is now complete on this host; record each move in the manifest that listed it.
    Returns one :class:`Outcome` per pending record."""
    from rlprof.layout import hostname
    from rlprof.backend_api import read_records, record_relocation

    host = host or hostname()
    roots = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    records = list(read_records(roots))
    moved_before = {r.get("relocated_from") for r in records if r.get("type") == "artifact" and r.get("relocated_from")}
    outcomes: list[Outcome] = []
    for record in records:
        if record.get("type") != "artifact" or record.get("kind") != PENDING or "relocate_to" not in record:
            continue
        run_dir = Path(record["_run_dir"])
        source = Path(record.get("source") or os.path.normpath(run_dir / record["path"]))
        target = run_dir / record["relocate_to"]
        if record.get("host") != host:
            outcomes.append(Outcome(str(source), str(target), "other-host"))
            continue
        if str(source) in moved_before:
            outcomes.append(Outcome(str(source), str(target), "done"))
            continue
        if not is_complete(source, settle_seconds):
            outcomes.append(Outcome(str(source), str(target), "waiting"))
            continue
        try:
            move_without_overwrite(source, target)
        except FileExistsError:
            outcomes.append(Outcome(str(source), str(target), "exists"))
            continue
        moved_before.add(str(source))
        record_relocation(record, target, source)
        outcomes.append(Outcome(str(source), str(target), "moved"))
    return outcomes


def relocate_after_exit(run_dirs: Iterable[Path | str]) -> int:
    """rlprof's after-exit step on one node (the backend's ``after_exit`` hook: the Ray controller calls
    it there once the workers have exited): :func:`relocate_pending` for this host; returns how many
    reports nsys is still writing (0: every pending report of this host is moved or accounted for)."""
    return sum(1 for outcome in relocate_pending(run_dirs) if outcome.status == "waiting")
