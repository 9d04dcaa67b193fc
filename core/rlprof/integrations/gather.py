"""``global_profiler.gather: traces``: every node's artifacts streamed to the controller's ``save_path``.

At the end of the run (after every worker finalized, so each file is complete) the controller pulls
each artifact a worker listed, file by file, in chunks of :data:`CHUNK_BYTES` through Ray (the
worker's :meth:`~rlprof.integrations.ray_worker.ProfiledWorker.rlprof_read`), with at most
:data:`IN_FLIGHT` chunks on their way: the controller's memory stays a few chunks whatever the file
size (bench/bench_gather.py: +39 MiB resident while gathering 1 GiB, +26 MiB for 128 MiB). Each file is written under a temporary name, its SHA-256 computed as it arrives and compared
with the one the worker computes on its own copy; only a verified file is given its name (a hard
link, which refuses an existing name: nothing is ever overwritten), and only then, with
``gather_delete_local``, is the node's copy deleted (if it still has that checksum).

``gather_budget_gb`` caps what one run moves: the first file that would pass it stops the gathering
with one warning; it and every later file stay on their node (``status: over_budget``). Training is
never stopped, and a failure (a worker gone, a disk full) leaves that file on its node, says so, and
goes on with the next. Each file's outcome is a ``gathered`` record in the controller's manifest,
which ``rlprof report`` uses to show where the file now is.

Files already in the controller's run directory (a worker on the controller's node writing to the
same save path) are left as they are.

Gathering sees the controller only through a :class:`Destination`: where the files go, how long to
wait for a node, the two limits, and the controller's manifest to record each file in.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlprof.integrations.nodes import sha256_of
from rlprof.integrations.ray_fanout import describe_error
from rlprof.manifest import GATHERED_RECORD, short_node

log = logging.getLogger("rlprof")

CHUNK_BYTES = 96 << 10
"""One chunk of a streamed file: under Ray's limit for returning a value inline in the reply (100 KiB,
``max_direct_call_object_size``), so chunks never pass through the object store. Measured
(bench/bench_gather.py, 1 GiB): 8 MiB chunks through the object store mapped ~144 MiB of its shared
pages into the controller at the same throughput; 96 KiB chunks, 16 in flight, none."""
IN_FLIGHT = 16
"""Chunks requested ahead, so the worker reads while the controller writes (16 x 96 KiB = 1.5 MiB)."""


# ------------------------------------------------------------------------------ worker side


def run_file(run_dir: Path, path: str) -> Path:
    """``path`` (relative to ``run_dir``) as a file of the run; refuses anything outside the run
    directory (the controller asks only for what the manifest lists, but a worker checks)."""
    full = (Path(run_dir) / path)
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise PermissionError(f"{path!r} is not a path inside the run directory {run_dir}")
    return full


def files_of(run_dir: Path, path: str) -> list[tuple[str, int]]:
    """The regular files of one artifact (itself, or every file under a directory), relative to
    ``run_dir``, with their sizes. Links are not followed."""
    top = run_file(run_dir, path)
    if top.is_symlink():
        return []
    if top.is_file():
        return [(path, top.stat().st_size)]
    found = []
    for here, dirs, files in os.walk(top):
        for name in sorted(files):
            full = Path(here) / name
            if full.is_file() and not full.is_symlink():
                found.append((os.path.relpath(full, run_dir), full.stat().st_size))
    return sorted(found)


def read_chunk(run_dir: Path, path: str, offset: int, size: int) -> bytes:
    with open(run_file(run_dir, path), "rb") as handle:
        handle.seek(offset)
        return handle.read(min(size, CHUNK_BYTES))


def delete_if_unchanged(run_dir: Path, path: str, sha256: str) -> bool:
    full = run_file(run_dir, path)
    if full.is_symlink() or not full.is_file() or sha256_of(full) != sha256:
        return False
    full.unlink()
    return True


class RunFiles:
    """What the controller asks of a node to gather a run's files: mixed into the Ray actors that can
    answer on that node (:class:`~rlprof.integrations.ray_worker.ProfiledWorker`, and
    :class:`~rlprof.integrations.nodes.NodeAgent` once the workers are gone). Every path is relative
    to :meth:`_rlprof_run_dir` and must stay inside it."""

    def _rlprof_run_dir(self) -> Path:
        raise NotImplementedError

    def rlprof_files(self, path: str) -> list[tuple[str, int]]:
        """The files of one artifact (a directory lists every file under it) with their sizes."""
        return files_of(self._rlprof_run_dir(), path)

    def rlprof_read(self, path: str, offset: int, size: int) -> bytes:
        """At most ``size`` bytes (and at most :data:`CHUNK_BYTES`) of a run file from ``offset``."""
        return read_chunk(self._rlprof_run_dir(), path, offset, size)

    def rlprof_sha256(self, path: str) -> str:
        return sha256_of(run_file(self._rlprof_run_dir(), path))

    def rlprof_delete_local(self, path: str, sha256: str) -> bool:
        """Delete this node's copy of a gathered file if it still has checksum ``sha256``."""
        return delete_if_unchanged(self._rlprof_run_dir(), path, sha256)


# ------------------------------------------------------------------------------ controller side


@dataclass(frozen=True)
class Destination:
    """What gathering reads of the controller (built by it: ``ProfilingController.destination``)."""

    run_dir: Path
    """The controller's run directory: where every gathered file goes."""
    timeout_s: float
    """The longest one request to a node may take."""
    budget_gb: float
    """``global_profiler.gather_budget_gb``: what one run moves at most."""
    delete_local: bool
    """``global_profiler.gather_delete_local``: delete a node's copy once gathered and verified."""
    write: Callable[..., None]
    """Appends one record to the controller's manifest: ``write(record_type, **fields)``."""


@dataclass
class Gathered:
    """What one run's gathering did (also in the controller's manifest, one ``gathered`` record per file)."""

    files: int = 0
    """Files now verified in the controller's run directory."""
    bytes: int = 0
    failed: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    deleted_local: int = 0
    seconds: float = 0.0


@dataclass
class Source:
    """Files to gather from one node: ``handle`` is a :class:`RunFiles` actor there, serving ``run_dir``."""

    handle: Any
    node: str | None
    run_dir: Path
    paths: list[str]
    """Artifact paths relative to ``run_dir`` (files or directories)."""


def gathered_paths(records: Any) -> list[str]:
    """The artifact paths of ``records`` (artifact records) that gathering moves: files in the run
    directory (not ``pending`` ones, not outside the run directory)."""
    if not isinstance(records, list):
        return []
    return sorted({r["path"] for r in records if isinstance(r, dict) and r.get("kind") != "pending"
                   and not r.get("outside_output_dir") and isinstance(r.get("path"), str)})


def gather_traces(to: Destination, sources: list[Source], done: Gathered | None = None) -> Gathered:
    """Stream the sources' files into ``to.run_dir``; ``done`` carries on an earlier call's
    count (one budget per run). Never raises."""
    import ray

    began = time.perf_counter()
    budget = int(to.budget_gb * 1e9)
    done = done or Gathered()
    for source in sources:
        handle, node, source_dir = source.handle, source.node, source.run_dir
        for path in source.paths:
            try:
                files = ray.get(handle.rlprof_files.remote(path), timeout=to.timeout_s)
            except Exception as exc:
                _record(to, done, node, source_dir / path, path, 0, None, "failed", error=describe_error(exc))
                continue
            for rel, size in files:
                if done.over_budget or done.bytes + size > budget:  # past the budget, gathering stops
                    if not done.over_budget:
                        log.warning("rlprof: global_profiler.gather_budget_gb=%g reached after %d files (%.2f GB); "
                                    "the remaining files stay on their nodes (the report lists where)",
                                    to.budget_gb, done.files, done.bytes / 1e9)
                    _record(to, done, node, source_dir / rel, rel, size, None, "over_budget")
                    continue
                _gather_one(to, done, handle, node, source_dir, rel, size)
    done.seconds += time.perf_counter() - began
    if done.files or done.failed or done.over_budget:
        log.info("rlprof: gathered %d files (%.1f MB) in %.1f s; %d failed, %d over budget", done.files,
                 done.bytes / 1e6, done.seconds, len(done.failed), len(done.over_budget))
    return done


def _gather_one(to: Destination, done: Gathered, handle: Any, node: str | None, source_dir: Path, rel: str,
                size: int) -> None:
    import ray

    from rlprof.layout import open_file

    run_dir = to.run_dir
    target = run_dir / rel
    source = source_dir / rel
    if os.path.lexists(target):
        _record(to, done, node, source, rel, size, None, "exists")  # never overwritten
        return
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    digest = hashlib.sha256()
    written = 0
    try:
        with open_file(partial, run_dir, "wb") as out:
            pending: deque = deque()
            asked = 0
            while asked < size or pending:
                while len(pending) < IN_FLIGHT and asked < size:
                    pending.append(handle.rlprof_read.remote(rel, asked, CHUNK_BYTES))
                    asked += CHUNK_BYTES
                chunk = ray.get(pending.popleft(), timeout=to.timeout_s)
                out.write(chunk)
                digest.update(chunk)
                written += len(chunk)
                del chunk
        theirs = ray.get(handle.rlprof_sha256.remote(rel), timeout=to.timeout_s)
        ours = digest.hexdigest()
        if written != size or theirs != ours:
            raise OSError(f"checksum mismatch: {written} of {size} bytes, sha256 {ours[:12]} here, {theirs[:12]} on the node")
        os.link(partial, target)  # refuses an existing name: a file that appeared meanwhile is kept
    except Exception as exc:
        _unlink(partial)
        _record(to, done, node, source, rel, size, None, "failed", error=describe_error(exc))
        return
    _unlink(partial)
    deleted = False
    if to.delete_local:
        try:
            deleted = bool(ray.get(handle.rlprof_delete_local.remote(rel, ours), timeout=to.timeout_s))
        except Exception as exc:
            log.warning("rlprof: could not delete %s on node %s after gathering it: %s", source, short_node(node), describe_error(exc))
    done.files += 1
    done.bytes += written
    done.deleted_local += deleted
    _record(to, done, node, source, rel, size, ours, "verified", deleted_local=deleted)


def _record(to: Destination, done: Gathered, node: str | None, source: Path, rel: str, size: int, sha256: str | None,
            status: str, **extra: Any) -> None:
    if status == "failed":
        done.failed.append(str(source))
        log.error("rlprof: could not gather %s from node %s (%s); it stays there", source, short_node(node),
                  extra.get("error"))
    elif status == "over_budget":
        done.over_budget.append(str(source))
    to.write(GATHERED_RECORD, node=node, source=str(source), path=rel, size=size, sha256=sha256, status=status,
                     **{"deleted_local": False, **extra})


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass

