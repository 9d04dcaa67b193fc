"""Where an engine's files go in the run: a replica's capture files, moved into the capture's directory
under names that say which replica wrote them, and the engine's own directory, checked before the
engine is built and removed at the end when empty. Used by :class:`rlprof.integrations.engines.replica.EngineReplica`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlprof.integrations.engines.plain_traces import PLAIN_TRACE, PlainTraces


def replica_file_name(name: str, prefix: str, replica_rank: int) -> str:
    """The name an engine's file gets in the run: ``replica<r>.`` then the engine's own name without
    the capture's ``<prefix>_``/``<prefix>-``. The engine names files by its worker inside the replica
    (vLLM: ``rank0.<ns>.pt.trace.json.gz`` on every replica), so the replica comes first:
    ``replica1.rank0.<ns>.pt.trace.json.gz``. The worker part stays (one file per GPU of a replica)."""
    for separator in "_-":
        if name.startswith(prefix + separator):
            name = name[len(prefix) + 1:]
            break
    return f"replica{replica_rank}.{name}"


def move_into(files: list[Path], ctx: Any, *, prefix: str, replica_rank: int, engine: str,
              plain: PlainTraces | None = None) -> list[Path]:
    """Move ``files`` (the engine's) into ``ctx.output_dir()`` without overwriting anything, each named
    by :func:`replica_file_name` (or its first free numbered name where that is taken:
    :func:`rlprof.layout.place_reserved`). Recorded (``ctx.add_artifact``) with ``replica_rank`` and
    ``engine``; returns where each file is (or will be). A file that cannot be moved stays where it is and
    is recorded there: never lost.

    A plain JSON trace (:data:`~rlprof.integrations.engines.plain_traces.PLAIN_TRACE`), given ``plain``, is
    compressed into ``<name>.gz`` off the engine instead
    (:class:`~rlprof.integrations.engines.plain_traces.PlainTraces`: listed ``writing`` now, ``written`` from
    the stand-in's next hook)."""
    from rlprof.layout import place_reserved

    target_dir = ctx.output_dir()
    root = ctx.run.run_dir
    moved: list[Path] = []
    for source in files:
        source = Path(source)
        name = replica_file_name(source.name, prefix, replica_rank)
        if plain is not None and source.name.endswith(PLAIN_TRACE):
            compressed = plain.hand_over(source, target_dir / f"{name}.gz", root, ctx, replica_rank=replica_rank,
                                         engine=engine)
            if compressed is not None:
                moved.append(compressed)
                continue
        where = source
        try:
            where = place_reserved(source, target_dir / name, root)
            os.unlink(source)
        except Exception as exc:
            ctx.warn(f"could not move {source} into {target_dir}: {type(exc).__name__}: {exc}; listed where it is")
        ctx.add_artifact(where, kind="trace" if ".trace.json" in where.name else "file",
                         replica_rank=replica_rank, engine=engine)
        moved.append(where)
    return moved


def unwritable(directory: Path, root: Path) -> str | None:
    """None when ``directory`` (created under ``root``) takes a file; else what went wrong."""
    from rlprof.layout import ensure_dir

    try:
        ensure_dir(directory, root)
        probe = directory / f".rlprof-probe-{os.getpid()}"
        with open(probe, "x"):
            pass
        os.unlink(probe)
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def remove_empty(directory: Path) -> None:
    for path in (directory, directory.parent):
        try:
            path.rmdir()
        except OSError:
            return
