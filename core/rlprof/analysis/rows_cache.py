"""A trace's rows kept where the layout says, keyed to the file's size and mtime, so a second read costs no trace.

In its run's own ``breakdown/`` folder, or for a file in no run in the cache folder (:func:`rlprof.layout.rows_path`);
never beside the file, whose folder holds only what the backends wrote. On a Ray run the node that holds a trace
writes that cache, and the same bytes are shipped to the controller (:func:`rlprof.layout.shipped_rows_path`);
:func:`shipped` reads them there when the trace is not. Rows made by another version of the row model are made again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rlprof.analysis.breakdown import Collective, TraceEvents
from rlprof.layout import ROWS_SUFFIX, new_file, rows_path
from rlprof.row_model import Row, rows_version

CACHE_SUFFIX = ROWS_SUFFIX
CACHE_VERSION = rows_version()
"""The rows' columns and definitions (:func:`rlprof.row_model.rows_version`); rows made by another
version are made again: a column added to the row model, or a definition changed, invalidates old caches by itself."""


@dataclass
class FileRows:
    """What a worker sends back for one file: its rows and what matching its collectives needs."""

    trace: TraceEvents
    """Without its event columns: path, rank, device, group, clock and collectives only."""
    rows: list[Row]


def shipped(rows_file: Path, trace: str, size: int) -> FileRows | None:
    """The rows a node shipped for ``trace`` (its path there), read from ``rows_file`` on this disk;
    None when there are none, or they were made from a file of another size than ``size`` (the
    manifest's record of the trace; 0: unknown) or by another version of this analysis."""
    data = _rows_data(str(rows_file))
    if data is None or data.get("key", {}).get("version") != CACHE_VERSION:
        return None
    if size and data["key"].get("size") != size:
        return None  # the trace changed after its node read it: its rows would be stale
    return _file_rows(data, trace)


def _without_events(trace: TraceEvents) -> TraceEvents:
    return TraceEvents(path=trace.path, rank=trace.rank, device=trace.device, group=trace.group,
                       clock_ms=trace.clock_ms, collectives=trace.collectives)


def _key(path: str) -> dict[str, int]:
    stat = os.stat(path)
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "version": CACHE_VERSION}


def _cached(path: str) -> FileRows | None:
    kept = rows_path(path)
    data = _rows_data(str(kept)) if kept is not None else None
    if data is None or data.get("key") != _key(path):
        return None  # no cache, another version's, or the file changed since: read the trace again
    return _file_rows(data, path)


def _rows_data(rows_file: str) -> dict | None:
    try:
        with open(rows_file, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _file_rows(data: dict, path: str) -> FileRows | None:
    """A rows file's content as the :class:`FileRows` of the trace at ``path``; None when damaged."""
    try:
        meta = data["trace"]
        trace = TraceEvents(path=path, rank=meta["rank"], device=meta["device"], group=meta["group"],
                            clock_ms=meta["clock_ms"], collectives=[Collective(*c) for c in meta["collectives"]])
        rows = [Row(**{**row, "path": path}) for row in data["rows"]]
    except (KeyError, TypeError, ValueError):
        return None
    return FileRows(trace, rows)


def rows_document(result: FileRows, key: dict[str, int]) -> dict:
    """A trace's rows file (its cache, :func:`rlprof.layout.rows_path`; the same bytes travel from its node to a Ray
    controller): ``key`` (the file's size, mtime and :data:`CACHE_VERSION`), the trace's rank, device,
    group, clock and collective calls (for the waits across ranks), and its rows."""
    trace = result.trace
    return {"key": key, "trace": {"rank": trace.rank, "device": trace.device, "group": trace.group,
                                  "clock_ms": trace.clock_ms,
                                  "collectives": [[c.name, c.ordinal, c.start, c.end, c.launch] for c in trace.collectives]},
            "rows": [vars(row) for row in result.rows]}


def _store(path: str, result: FileRows) -> None:
    """Keep the rows where the layout says (:func:`rlprof.layout.rows_path`: the run's own ``breakdown/``
    folder, else the cache folder), never beside the trace; nothing where there is no such place or it
    cannot be written (a run on a read-only disk, a link planted as the folder: never followed)."""
    target = rows_path(path)
    if target is None:
        return
    data = json.dumps(rows_document(result, _key(path))).encode()
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        with new_file(temporary, target.parent) as handle:
            handle.write(data)
        os.replace(temporary, target)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
