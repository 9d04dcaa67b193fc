"""Nsight Systems reports read for the breakdown: ``nsys export --type sqlite`` output (and ``.nsys-rep``
through that export).

:func:`read_trace` turns one export into the analysis's neutral
:class:`~rlprof.analysis.breakdown.TraceEvents`. It streams: each table is read by one SQL query
whose rows are taken one at a time (the launch matched to its device event by SQLite's join, not
in Python), so memory follows the number of device events kept, not the size of the database.

What is read, as the SQLite export schema 3.x documents it (Nsight Systems 2022.4 writes 3.0.0; the
schema is in ``EXPORT_META_DATA``):

* ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``: every timestamp is ns after it, so ranks of one
  host share a clock;
* ``NVTX_EVENTS`` ranges (event types 59 push/pop and 60 start/end; the domain is named by the
  type-75 event of its ``domainId``, a range's text is ``text`` or its registered ``StringIds``
  ``textId``): the regions are rlprof's own ranges (domain ``rlprof``: ``stepN`` and each role
  region, not the capture window ``rlprof_capture``) and any ``ProfilerStep#N`` range;
* device events: ``CUPTI_ACTIVITY_KIND_KERNEL`` (name: ``shortName`` in ``StringIds``),
  ``CUPTI_ACTIVITY_KIND_MEMCPY`` and ``CUPTI_ACTIVITY_KIND_MEMSET`` (copies), each launched by the
  ``CUPTI_ACTIVITY_KIND_RUNTIME`` call with its ``correlationId`` in the same process (the process
  is bits 24 and up of ``globalTid`` / ``globalPid``).

The CUDA tables exist only where CUDA ran; a CPU-only capture (every nsys run on a machine without
a GPU) has NVTX ranges and no device event, and is refused with one line saying so: nsys records
no host ops the breakdown could split. A report holding several processes is read for one: the
process with the most device events among those with regions (else the most device events).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import urllib.parse
from pathlib import Path
from typing import Iterator

from rlprof.backend_api import COMMUNICATION, Region, TraceEvents, device_kind, numbered_collectives, regions_in_steps
from rlprof.layout import CACHE_ENV, ensure_dir, process_of, rows_path

from .nvtx_summary import export_sqlite
from .ranges import DOMAIN, WINDOW_RANGE

SCHEMA_MAJOR = "3"
"""The export schema major version this reader knows (``EXPORT_SCHEMA_VERSION_MAJOR``)."""
EXPORT_SUFFIX = ".rlprof-export"
"""A ``.nsys-rep``'s SQLite export is kept where the analysis keeps what it derives from a trace
(:func:`rlprof.layout.rows_path`: the run's ``breakdown/`` folder, else the cache folder), never beside
the report, under a name that ends so (no reader pattern matches it: it is never read as a second trace)."""
RANGE_TYPES = (59, 60)
DOMAIN_CREATE = 75
PROCESS_SHIFT = 24
"""A serialized ``globalTid``/``globalPid`` without its low 24 bits (the thread) names the process."""
DEVICE_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": False, "CUPTI_ACTIVITY_KIND_MEMCPY": True,
                 "CUPTI_ACTIVITY_KIND_MEMSET": True}
"""Device event tables -> whether their events are copies (memory) rather than kernels."""
COLUMNS = {
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "textId", "domainId", "globalTid"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "correlationId", "globalTid"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "correlationId", "globalPid", "shortName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "correlationId", "globalPid"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "correlationId", "globalPid"),
}
"""The columns read from each table; an export without them is of a schema this reader does not know."""
STEP_NAME = re.compile(r"(?:ProfilerStep#|step)(\d+)$")


class NotReadable(ValueError):
    """The file is not an nsys SQLite export this reader knows, or holds nothing the breakdown can split."""


def read_trace(path: str) -> TraceEvents:
    """The export at ``path`` (or the ``.nsys-rep`` at ``path``, exported beside it) in the breakdown's neutral form.

    :raises NotReadable: not SQLite, not an nsys export, another schema version, no device events.
    :raises RuntimeError: a ``.nsys-rep`` nsys could not export (or no nsys on PATH).
    """
    database = exported(Path(path))
    try:
        connection = sqlite3.connect(f"file:{urllib.parse.quote(str(database))}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise NotReadable(f"cannot open as SQLite ({exc})") from exc
    try:
        return _read(connection, path)
    except sqlite3.DatabaseError as exc:  # not a database, or a damaged / truncated one
        raise NotReadable(f"not a readable SQLite database ({exc})") from exc
    finally:
        connection.close()


def exported(path: Path) -> Path:
    """The SQLite export of ``path``: itself, unless it is a ``.nsys-rep``; then its export, made with
    ``nsys export`` when missing or older than the report, kept where :func:`rlprof.layout.rows_path`
    says (never beside the report; written through a temporary name, so concurrent readers never see
    half a file)."""
    if not path.name.endswith(".nsys-rep"):
        return path
    export = rows_path(str(path), EXPORT_SUFFIX)
    how = "run 'nsys export --type sqlite' on it and give the .sqlite"
    if export is None:
        raise NotReadable(f"{CACHE_ENV} is set empty, so its export has nowhere to go: {how}")
    if export.is_file() and export.stat().st_mtime_ns >= path.stat().st_mtime_ns:
        return export
    try:
        ensure_dir(export.parent, export.parent)
    except OSError as exc:
        raise NotReadable(f"its export cannot be kept in {export.parent} ({exc.strerror or exc}): {how}") from None
    temporary = export.with_name(f"{export.name}.{os.getpid()}.tmp")
    try:
        export_sqlite(path, temporary)
        os.replace(temporary, export)
    finally:
        temporary.unlink(missing_ok=True)
    return export


def _read(connection: sqlite3.Connection, path: str) -> TraceEvents:
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    _check_schema(connection, tables)
    device_tables = [table for table in DEVICE_TABLES if table in tables]
    if not device_tables:
        raise NotReadable("no device events: no CUDA kernel, memcpy or memset table (a CPU-only capture; "
                          "nsys records no host ops to split)")
    process = _process(connection, device_tables, "NVTX_EVENTS" in tables)
    start_ns = connection.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone() \
        if "TARGET_INFO_SESSION_START_TIME" in tables else None
    rank, group = _place(path)
    trace = TraceEvents(path=path, rank=rank, device="cuda", group=group,
                        clock_ms=start_ns[0] / 1e6 if start_ns and start_ns[0] else 0.0)
    calls = []
    for start, end, launch, name, memory in _device_events(connection, device_tables, process,
                                                           "CUPTI_ACTIVITY_KIND_RUNTIME" in tables):
        kind = device_kind(name, memory)
        trace.add(start, end, kind, launch)
        if kind == COMMUNICATION:
            calls.append((start, end, launch, name))
    if not len(trace.kinds):
        raise NotReadable("no device events in its CUDA tables")
    trace.collectives = numbered_collectives(calls)
    trace.regions = regions(connection, process) if "NVTX_EVENTS" in tables else []
    return trace


def _check_schema(connection: sqlite3.Connection, tables: set[str]) -> None:
    """Refuse, in one line, an export of a schema this reader does not know (or no nsys export at all)."""
    if "EXPORT_META_DATA" not in tables:
        raise NotReadable("not an nsys SQLite export (no EXPORT_META_DATA table)")
    meta = dict(connection.execute("SELECT name, value FROM EXPORT_META_DATA"))
    major = str(meta.get("EXPORT_SCHEMA_VERSION_MAJOR", ""))
    if major != SCHEMA_MAJOR:
        raise NotReadable(f"nsys export schema version {meta.get('EXPORT_SCHEMA_VERSION', major or 'unknown')}; "
                          f"this reader knows {SCHEMA_MAJOR}.x (Nsight Systems 2022.4 and later)")
    for table, needed in COLUMNS.items():
        if table in tables:
            present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            missing = [column for column in needed if column not in present]
            if missing:
                raise NotReadable(f"nsys export schema {meta.get('EXPORT_SCHEMA_VERSION')}: "
                                  f"{table} lacks {', '.join(missing)}")


def _process(connection: sqlite3.Connection, device_tables: list[str], nvtx: bool) -> int:
    """The process read (``globalPid >> 24``): the one with the most device events among those with
    NVTX ranges, else the one with the most device events."""
    counts: dict[int, int] = {}
    for table in device_tables:
        for process, count in connection.execute(
                f"SELECT globalPid >> {PROCESS_SHIFT}, COUNT(*) FROM {table} GROUP BY 1"):
            counts[process] = counts.get(process, 0) + count
    with_ranges = set()
    if nvtx:
        with_ranges = {row[0] for row in connection.execute(
            f"SELECT DISTINCT globalTid >> {PROCESS_SHIFT} FROM NVTX_EVENTS "
            f"WHERE eventType IN ({','.join('?' * len(RANGE_TYPES))})", RANGE_TYPES)}
    return max(counts, key=lambda process: (process in with_ranges, counts[process]))


def _device_events(connection: sqlite3.Connection, device_tables: list[str], process: int,
                   runtime: bool) -> Iterator[tuple[float, float, float, str, bool]]:
    """``(start, end, launch, name, is_copy)`` in ms of every device event of ``process``; ``launch`` is
    its runtime call's start (inf when the call is not in the report)."""
    for table in device_tables:
        name = "COALESCE(s.value, '')" if table == "CUPTI_ACTIVITY_KIND_KERNEL" else "''"
        names = "LEFT JOIN StringIds s ON s.id = d.shortName" if table == "CUPTI_ACTIVITY_KIND_KERNEL" else ""
        launch = "r.start" if runtime else "NULL"
        launches = (f"LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = d.correlationId "
                    f"AND r.globalTid >> {PROCESS_SHIFT} = d.globalPid >> {PROCESS_SHIFT}") if runtime else ""
        query = (f"SELECT d.start, d.end, {launch}, {name} FROM {table} d {launches} {names} "
                 f"WHERE d.globalPid >> {PROCESS_SHIFT} = ?")
        memory = DEVICE_TABLES[table]
        for start, end, launched, kernel in connection.execute(query, (process,)):
            yield start / 1e6, end / 1e6, math.inf if launched is None else launched / 1e6, kernel, memory


def regions(connection: sqlite3.Connection, process: int | None = None) -> list[Region]:
    """The regions of the NVTX ranges (of ``process``, or every process): rlprof's own ranges but its
    capture window, and ``ProfilerStep#N`` in any domain; each with the step whose range holds it."""
    text = "COALESCE(e.text, s.value)"
    domains = {domain: name for domain, name in connection.execute(
        f"SELECT e.domainId, {text} FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        f"WHERE e.eventType = ?", (DOMAIN_CREATE,))}
    where = f"AND e.globalTid >> {PROCESS_SHIFT} = ?" if process is not None else ""
    found, steps = [], []
    for start, end, name, domain in connection.execute(
            f"SELECT e.start, e.end, {text}, e.domainId FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            f"WHERE e.eventType IN ({','.join('?' * len(RANGE_TYPES))}) AND e.end IS NOT NULL {where}",
            RANGE_TYPES + ((process,) if process is not None else ())):
        name = name or ""
        ours = domains.get(domain) == DOMAIN
        step = STEP_NAME.match(name)
        if step and (ours or name.startswith("ProfilerStep#")):
            steps.append(Region(name, int(step.group(1)), start / 1e6, end / 1e6))
        elif ours and name != WINDOW_RANGE:
            found.append((name, start / 1e6, end / 1e6))
    return regions_in_steps(steps, found)


def _place(path: str) -> tuple[int | None, str]:
    """The rank and the group of a report: rlprof's layout names them (the ranks of one capture are one
    group); elsewhere the rank is unknown and the directory is the group."""
    process = process_of(Path(path))
    if process is not None:
        return process[0], str(process[1])
    return None, str(Path(path).resolve().parent)
