"""A stand-in for ``nsys export --type sqlite`` of a CUDA run, written by tests (no GPU here to record one),
and the real report of a CPU-only run that nsys records here (:func:`record_cpu_report`).

Only the tables and columns the breakdown reads, with the types and meanings the SQLite export schema
3.0.0 documents (Nsight Systems 2022.4: ``EXPORT_META_DATA``, ``StringIds``,
``TARGET_INFO_SESSION_START_TIME``, ``NVTX_EVENTS``, ``CUPTI_ACTIVITY_KIND_RUNTIME`` /
``_KERNEL`` / ``_MEMCPY`` / ``_MEMSET``): timestamps in ns after the session start, names through
``StringIds``, serialized ``globalTid`` / ``globalPid`` (the pid in bits 24-47), a device event
tied to its launching runtime call by ``correlationId``. The NVTX and metadata tables match a real
export recorded here (test_nsys_breakdown.py reads one too); the CUDA tables follow the schema.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

MS = 1_000_000
"""ns per ms: the stand-in is written in ms, the export holds ns."""


def global_tid(pid: int, tid: int | None = None) -> int:
    return (pid << 24) | (pid if tid is None else tid)


def global_pid(pid: int) -> int:
    return pid << 24


@dataclass
class Export:
    """What one stand-in export holds; times in ms."""

    pid: int = 4242
    start_utc_ns: int = 1_700_000_000_000_000_000
    schema_major: str = "3"
    ranges: list[tuple[str, float, float, str]] = field(default_factory=list)
    """(name, start, end, domain)"""
    kernels: list[tuple[str, float, float, float]] = field(default_factory=list)
    """(name, start, end, launch); launch None: no runtime call in the report"""
    copies: list[tuple[str, float, float, float]] = field(default_factory=list)
    """(``memcpy`` or ``memset``, start, end, launch)"""
    other_process_kernels: list[tuple[str, float, float, float]] = field(default_factory=list)
    """Kernels of a second process of the same report (no NVTX ranges): never this trace's."""


def write_export(path: Path, export: Export) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);
        CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
            category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
            domainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
            returnValue INTEGER NOT NULL, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
            contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
            demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
            contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
            bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
            contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
            value INTEGER NOT NULL, bytes INTEGER NOT NULL);
    """)
    major = export.schema_major
    db.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)", [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", f"{major}.0.0"),
        ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", "0")])
    db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (export.start_utc_ns,))
    strings: dict[str, int] = {}

    def string(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[text], text))
        return strings[text]

    domains: dict[str, int] = {}
    tid = global_tid(export.pid)
    for name, start, end, domain in export.ranges:
        if domain not in domains:
            domains[domain] = len(domains) + 1
            db.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) VALUES (0, 75, ?, ?, ?)",
                       (domain, tid, domains[domain]))
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId) VALUES (?, ?, 60, ?, ?, ?)",
                   (int(start * MS), int(end * MS), tid, string(name), domains[domain]))
    correlation = iter(range(1, 1_000_000))

    def launched(pid: int, launch: float | None) -> int:
        number = next(correlation)
        if launch is not None:
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, 0)",
                       (int(launch * MS), int(launch * MS) + 1000, global_tid(pid), number, string("cudaLaunchKernel")))
        return number

    for pid, kernels in ((export.pid, export.kernels), (export.pid + 1, export.other_process_kernels)):
        for name, start, end, launch in kernels:
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, ?, ?, ?, ?)",
                       (int(start * MS), int(end * MS), launched(pid, launch), global_pid(pid), string(name + "(int)"),
                        string(name), string("_Z" + name)))
    for kind, start, end, launch in export.copies:
        table = "CUPTI_ACTIVITY_KIND_MEMCPY" if kind == "memcpy" else "CUPTI_ACTIVITY_KIND_MEMSET"
        db.execute(f"INSERT INTO {table} VALUES (?, ?, 0, 1, 8, ?, ?, 4096, 1)",
                   (int(start * MS), int(end * MS), launched(export.pid, launch), global_pid(export.pid)))
    db.commit()
    db.close()
    return path


RANGES_SCRIPT = textwrap.dedent("""
    import time
    from rlprof_nsys import nvtx_client
    tool = nvtx_client.tool()
    domain = tool.domain("rlprof")
    for step in (1, 2):
        outer = tool.range_start(domain, nvtx_client.ascii_text(f"step{step}"), 0xFF7F7F7F, 0)
        inner = tool.range_start(domain, nvtx_client.ascii_text("actor_update"), 0xFF76B900, 1)
        time.sleep(0.02)
        tool.range_end(domain, inner)
        tool.range_end(domain, outer)
""")
"""Opens rlprof's ``step1``/``step2`` and ``actor_update`` ranges (20 ms each) in the ``rlprof`` NVTX domain."""


def record_cpu_report(directory: Path, nsys: str) -> Path:
    """A real ``nsys profile`` of a process that opens rlprof's step and role ranges (no CUDA here):
    ``<directory>/cpu.nsys-rep``, beside the script it ran (``ranges.py``)."""
    script = directory / "ranges.py"
    script.write_text(RANGES_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    subprocess.run([nsys, "profile", "-t", "nvtx", "--sample=none", "--cpuctxsw=none", "-o", str(directory / "cpu"),
                    sys.executable, str(script)], check=True, capture_output=True, env=env, timeout=180)
    return directory / "cpu.nsys-rep"
