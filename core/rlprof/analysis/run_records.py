"""A run's records as its report takes them: which records are usable (:data:`REQUIRED`, from each record type's
declaration where it has one), which artifact records are settled, and where each file is now (moved by a finish
hook, relocated, gathered to the controller, on another node)."""

from __future__ import annotations

import bisect
import os
from typing import Any, Sequence

from rlprof.analysis.anatomy import process_order, timing_record
from rlprof.analysis.cost import is_wait
from rlprof.analysis.run_report import File
from rlprof.manifest import (FAILURE_RECORD, GATHERED_RECORD, NODE_RECORD, WRITING, WRITTEN, CaptureRecord,
                             FrameworkIdleRecord, NodeLostRecord, NodeRecord, PhaseRecord, ProcessRecord, StalenessRecord,
                             UnprofiledStepsRecord, required, settled_artifacts)

def locate(records: Sequence[dict[str, Any]]) -> None:
    """:func:`place_files` for a run's records as :func:`rlprof.manifest.read_records` gives them (``rlprof
    timeline`` reads the traces where the report says they are)."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("type") in ("artifact", NODE_RECORD, GATHERED_RECORD) and usable(r):
            by_type.setdefault(r["type"], []).append(r)
    place_files(by_type)


def settled(artifacts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The files as they are, and those that never were written.

    Records written in the background come in pairs (:func:`rlprof.manifest.settled_artifacts`); a
    ``writing`` record left alone is a file the process did not finish: if it is at its path after all
    (placed after the last record, e.g. after finalize stopped waiting: a file appears under its final
    name only whole) it counts, with its size on disk, else it is unwritten, as is a ``failed`` one.
    ``pending`` records that were moved since (a later record says ``relocated_from`` their ``source``:
    nsys reports written at exit, then relocated) are dropped."""
    records, unwritten = [], []
    for a in settled_artifacts(artifacts):
        state = a.get("state")
        if state == WRITING and os.path.isfile(os.path.join(a["_run_dir"], a["path"])):
            a.update(state=WRITTEN, size=os.path.getsize(os.path.join(a["_run_dir"], a["path"])))
        elif state is not None and state != WRITTEN:
            unwritten.append(a)
            continue
        records.append(a)
    moved = {a["relocated_from"] for a in records if a.get("relocated_from")}
    if moved:
        records = [a for a in records if not (a.get("kind") == "pending" and a.get("source") in moved)]
    return records, unwritten


def place_files(by_type: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Point each artifact record at where its file is: a manifest the controller gathered from another
    node (headed by a ``node`` record) lists files on that node (``_run_dir`` becomes the node's run
    directory, ``_node`` its id), unless ``gather: traces`` moved the file here (a ``verified``
    ``gathered`` record for it, or for every file under a directory artifact): then ``_run_dir`` is
    the controller's and ``_gathered_from`` the node path. Returns the ``node`` records by manifest."""
    heads = {r["_manifest"]: r for r in by_type.get(NODE_RECORD, [])}
    if not heads:
        return heads
    moves = {g["source"]: g for g in by_type.get(GATHERED_RECORD, [])}  # the last word on each file
    sources = sorted(moves)
    for a in by_type.get("artifact", []):
        head = heads.get(a["_manifest"])
        if head is None:
            continue
        a["_node"] = head.get("node")
        source = os.path.join(head["node_run_dir"], a["path"])
        under = [moves[source]] if source in moves else _under(sources, source + os.sep, moves)
        if under and all(g["status"] in ("verified", "exists") for g in under):
            a["_gathered_from"] = source
            a["_run_dir"] = under[0]["_run_dir"]
        else:
            a["_run_dir"] = head["node_run_dir"]
    return heads


def _under(sources: list[str], prefix: str, moves: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``gathered`` records of files under a directory (``sources`` sorted: a bisect, not a scan)."""
    found = []
    for i in range(bisect.bisect_left(sources, prefix), len(sources)):
        if not sources[i].startswith(prefix):
            break
        found.append(moves[sources[i]])
    return found


def files_of(artifacts: list[dict[str, Any]], replicas: dict[str, int | None]) -> list[File]:
    """Each file once, whatever number of roles or steps its artifact records name. Only its
    existence is checked (one ``lstat``); it is never read. ``replicas``: manifest -> its process's ``replica_rank``."""
    files: dict[str, File] = {}
    for a in artifacts:
        path = os.path.join(a["_run_dir"], a["path"])
        known = files.get(path)
        if known is None:
            files[path] = File(path=path, size=int(a.get("size") or 0), backend=a["backend"], rank=a["rank"], host=a["host"],
                               pid=a["pid"], capture=a.get("capture"), steps=list(a.get("steps") or []),
                               roles=list(a.get("roles") or []), region=a.get("region"), exists=os.path.lexists(path),
                               replica_rank=replicas.get(a["_manifest"]), node=a.get("_node"),
                               gathered_from=a.get("_gathered_from"))
            continue
        known.size = max(known.size, int(a.get("size") or 0))
        known.steps += [s for s in a.get("steps") or [] if s not in known.steps]
        known.roles += [r for r in a.get("roles") or [] if r not in known.roles]
    return sorted(files.values(), key=lambda f: (min(f.steps, default=-1), f.capture or "", process_order(f.rank, f.replica_rank),
                                                 f.host, f.pid, f.backend, f.path))


WHO = {"rank": int, "host": str, "pid": int}
"""The common fields of a process's records (the writer's), as a report needs them."""
REQUIRED = {
    ProcessRecord.TYPE: {**WHO, **required(ProcessRecord)},
    "artifact": {"rank": int, "host": str, "pid": int, "backend": str, "path": str},
    "finalized": {},
    "error": {},
    "skip": {"rank": int, "backend": str, "reason": str},
    CaptureRecord.TYPE: {"rank": int, **required(CaptureRecord)},
    "warning": {"rank": int, "message": str},
    FAILURE_RECORD: {},
    GATHERED_RECORD: {"source": str, "path": str, "status": str},
    **{cls.TYPE: required(cls) for cls in (UnprofiledStepsRecord, NodeRecord, NodeLostRecord, PhaseRecord, StalenessRecord,
                                           FrameworkIdleRecord)},  # rank None: a driver's or the controller's
}
"""The fields (and their types) a record needs to be used; others are ignored (see :func:`usable`). A typed record's
are its declaration's (:func:`rlprof.manifest.required`); the records a backend's call fills (``artifact``,
``skip``, ``warning``) and ``gathered`` carry fields of their own beside these, and list the few a report needs."""


def usable(record: dict[str, Any]) -> bool:
    """A record the report can use: a known type with its required fields (a manifest edited by hand
    or cut short must not break the report), or a timing record the anatomy accepts."""
    kind = record.get("type")
    if kind in ("step", "region"):
        return timing_record(record)
    if is_wait(kind):
        return type(record.get("step")) is int
    needed = REQUIRED.get(kind)
    return needed is not None and all(type(record.get(k)) is t for k, t in needed.items())
