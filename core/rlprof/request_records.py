"""A rollout request's record, declared once: what its engine measured of it, on the run's clock, and its file.

Why: rollout is most of an RL step and its cost is a tail of slow requests (issue 48), which a region per
replica (``rollout_generate``) cannot show. The engines already time every request (vLLM's
``RequestStateStats``, SGLang's ``meta_info``); rlprof keeps those times, mapped once to the run's clock,
as one :class:`RequestRecord` per request, every step, every replica (docs/analysis.md, "Rollout requests").

Who writes what:

* a **source** (an engine adapter's ``requests`` method, :mod:`rlprof.integrations.engines.contract`; the
  demo's own rollout; a framework integration) builds records and hands them to the replica's Profiler
  (:meth:`rlprof.Profiler.record_requests`): one list append, nothing encoded there;
* the process's flusher sends them with the step timings (:class:`rlprof.runtime.step_timings.Batch`
  ``requests``), the path region timings take to the run's driver;
* the driver's :class:`~rlprof.runtime.step_book.StepBook` gives each record to its step, computes the
  step's figures (:mod:`rlprof.request_figures`) and appends the step's records to the run's file
  (:class:`RecordFile`), within ``global_profiler.request_records_mb``; the figures are always kept (in
  ``step_metrics.jsonl``).

**The file**: ``<run>/rollout_requests.jsonl.gz`` where a driver combines the run (``<run>/rollout_requests/
<rank>-<host>-<pid>.jsonl.gz`` per process where none does), one gzip member per step, each a JSON line
``{"step": N, "origin_ns": T, "count": n, "columns": {...}}``: a column per field of :class:`RequestRecord`
that some record of the step has (``step`` is the line's), the times (``*_ns``) as whole microseconds after
``origin_ns`` (the step's start) under ``*_us``. A step left out by the budget is ``{"step": N, "left_out":
n}``. A member cut short (a process killed mid-write) ends the reading of that file, nothing else.
:func:`read_file` reads it back into the same records. About 27-43 bytes a request, compressed (27 at
10,000 requests a step, 43 at 16; bench/bench_request_records.py prints it).

**The clock**: every time is ``time.time_ns()`` of the host (the clock step timings use). An engine that
stamps with its own monotonic clock (vLLM's engine core) is mapped with :class:`EngineClock`: the offset
between the two clocks measured once, in the replica's process, and checked against the engine's own
wall-clock arrival time (:meth:`EngineClock.check`).

A leaf: sources (integrations), the driver (runtime) and the report (analysis) all use it.
"""

from __future__ import annotations

import gzip
import itertools
import json
import logging
import threading
import time
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

log = logging.getLogger("rlprof")

FILE = "rollout_requests.jsonl.gz"
"""The run's records, where one driver combines the run (under the run directory)."""
PROCESS_DIR = "rollout_requests"
"""Per-process files where no driver combines them (``<run>/rollout_requests/<rank>-<host>-<pid>.jsonl.gz``)."""


@dataclass(slots=True)
class RequestRecord:
    """One request a rollout replica served in one step (or parameter version). Every time is ``time.time_ns()``
    of the run's hosts; a field the source cannot give is None (never 0)."""

    id: str
    """The engine's request id (or the framework's sample id)."""
    replica: int
    """The rollout replica that served it (its replica rank; a hybrid worker's rank)."""
    step: int | None = None
    """The step (an async run's parameter version) it belongs to; None: the driver gives it the step whose window
    holds its arrival (the rule region timings follow)."""
    arrival_ns: int | None = None
    """The engine received it."""
    queued_ns: int | None = None
    """It entered the engine's scheduler queue."""
    scheduled_ns: int | None = None
    """It was first scheduled (its prefill began): it runs from here."""
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    """Its last token: it ends here."""
    prompt_tokens: int | None = None
    generated_tokens: int | None = None
    finish_reason: str | None = None
    """The engine's word: ``length``, ``stop``, ``abort``..."""
    preemptions: int | None = None
    tool_s: float | None = None
    """In an agent loop: the time its tool calls took, as the framework measured it."""
    reward_s: float | None = None
    """In an agent loop: the time its reward took."""
    generate_s: float | None = None
    """In an agent loop: the time its sample's generate calls took as the framework measured them, from the caller
    (routing, the call, the server's queue; verl's ``AgentLoopMetrics.generate_sequences``, every turn together)."""

    @property
    def start_ns(self) -> int | None:
        """When it began to run: scheduled, else arrived."""
        return self.scheduled_ns if self.scheduled_ns is not None else self.arrival_ns

    @property
    def end_ns(self) -> int | None:
        """When it ended: its last token."""
        return self.last_token_ns


def joined(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """``records`` with those of one request as one: a source that knows part of a request (a framework's
    per-sample metrics, ``replica`` -1: it does not know the replica) fills what its replica's record left None.
    A request is its ``id`` on its replica: two replicas' engines number their requests alike (vLLM counts from 0
    in each), so their records stay apart; a record without a replica joins the first replica's record of its id.
    The replica's record is kept first (a record with a replica before one without), in order."""
    if len(records) < 2:
        return list(records)
    out: list[RequestRecord] = []
    on_replica: dict[tuple[int, str], RequestRecord] = {}
    by_id: dict[str, RequestRecord] = {}
    for record in sorted(records, key=lambda r: r.replica < 0):
        if record.replica >= 0:
            kept = on_replica.get((record.replica, record.id))
            if kept is None:
                on_replica[record.replica, record.id] = record
                by_id.setdefault(record.id, record)
                out.append(record)
                continue
        else:
            kept = by_id.get(record.id)
            if kept is None:
                by_id[record.id] = record
                out.append(record)
                continue
        for name in FIELDS:
            if getattr(kept, name) is None:
                setattr(kept, name, getattr(record, name))
    return out


FIELDS = tuple(f.name for f in fields(RequestRecord))
"""Every field, in declaration order: the file's columns (``step`` excepted: the line's)."""
TIMES = tuple(name for name in FIELDS if name.endswith("_ns"))
"""The fields that are times: stored as microseconds after the line's origin (``<name>_us``)."""
COLUMNS = tuple(name for name in FIELDS if name != "step")


def column_name(name: str) -> str:
    """The column a field is stored under: a time ``x_ns`` as ``x_us``."""
    return name[:-3] + "_us" if name in TIMES else name


def to_columns(records: Sequence[RequestRecord], origin_ns: int) -> dict[str, list[Any]]:
    """``records`` as columns (see the module doc); a column no record has a value for is left out."""
    out: dict[str, list[Any]] = {}
    for name in COLUMNS:
        values = [getattr(r, name) for r in records]
        if all(v is None for v in values):
            continue
        if name in TIMES:
            values = [None if v is None else (v - origin_ns + 500) // 1000 for v in values]
        out[column_name(name)] = values
    return out


def from_columns(columns: dict[str, list[Any]], origin_ns: int, step: int | None, count: int) -> list[RequestRecord]:
    """The records of one line (:func:`to_columns` read back; times to the nearest microsecond). A column missing
    or of another length reads as None (``id`` as ``""``, ``replica`` as -1)."""
    values: list[Any] = []
    for name in FIELDS:
        column = columns.get(column_name(name)) if name != "step" else None
        if name == "step" or not isinstance(column, list) or len(column) != count:
            values.append(itertools.repeat(step if name == "step" else {"id": "", "replica": -1}.get(name), count))
        elif name in TIMES:
            values.append([None if v is None else origin_ns + int(v) * 1000 for v in column])
        else:
            values.append(column)
    return [RequestRecord(*row) for row in zip(*values)]


# ------------------------------------------------------------------------------------------ the file


@dataclass
class StepRecords:
    """One step's line of a records file."""

    step: int
    records: list[RequestRecord]
    left_out: int = 0
    """Records the budget left out of this step (then ``records`` is empty)."""


class RecordFile:
    """Appends each step's records to one file, one gzip member a step, within ``budget_bytes`` (0: no limit).
    Past the budget a step's records are left out and its line says how many. Never raises: a write that fails
    is logged once and its step counted as left out. Thread-safe (a book may be pumped from two threads)."""

    def __init__(self, path: Path, root: Path, budget_bytes: int = 0):
        self.path = path
        self.root = root
        self.budget_bytes = budget_bytes
        self.written_bytes = 0
        self.records = 0
        """Records written so far."""
        self.left_out = 0
        """Records the budget or a failed write left out."""
        self._handle: Any = None
        self._failed = False
        self._lock = threading.Lock()

    def write(self, step: int, origin_ns: int, records: Sequence[RequestRecord]) -> bool:
        """Append ``step``'s records (its figures are the caller's); False when they were left out."""
        if not records:
            return True
        line = {"step": step, "origin_ns": origin_ns, "count": len(records), "columns": to_columns(records, origin_ns)}
        member = gzip.compress(json.dumps(line, separators=(",", ":")).encode(), compresslevel=6, mtime=0)
        with self._lock:
            return self._write(step, member, len(records))

    def _write(self, step: int, member: bytes, count: int) -> bool:
        if self._failed or (self.budget_bytes and self.written_bytes + len(member) > self.budget_bytes):
            self.left_out += count
            self._append(gzip.compress(json.dumps({"step": step, "left_out": count}).encode(), mtime=0))
            return False
        if not self._append(member):
            self.left_out += count
            return False
        self.records += count
        return True

    def _append(self, member: bytes) -> bool:
        if self._failed:
            return False
        try:
            if self._handle is None:
                from rlprof.layout import open_file

                self._handle = open_file(self.path, self.root, "ab")
            self._handle.write(member)
            self._handle.flush()
            self.written_bytes += len(member)
            return True
        except (OSError, ValueError) as exc:
            self._failed = True
            log.error("rlprof: cannot write the rollout request records %s (%s: %s); their figures are kept in the "
                      "step metrics, the records of later steps are left out", self.path, type(exc).__name__, exc)
            self.close()
            return False

    def close(self) -> None:
        from rlprof.layout import close_quietly

        handle, self._handle = self._handle, None
        close_quietly(handle)


def record_files(run_dir: Path) -> list[Path]:
    """A run's records files: the run's own when a driver wrote one, else every process's."""
    run_dir = Path(run_dir)
    if (run_dir / FILE).is_file():
        return [run_dir / FILE]
    return sorted((run_dir / PROCESS_DIR).glob("*.jsonl.gz"))


def read_file(path: Path, steps: Iterable[int] | None = None) -> Iterator[StepRecords]:
    """The steps of one records file (only ``steps``, when given: the others are decompressed, not decoded), in file
    order; reading stops at a member cut short or unreadable."""
    wanted = None if steps is None else set(steps)
    with open(path, "rb") as handle:
        data = handle.read()
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            text = inflater.decompress(data)
        except zlib.error:
            return
        if not inflater.eof:
            return  # cut short
        data = inflater.unused_data
        if wanted is not None and _step_of(text) not in wanted:
            continue
        try:
            line = json.loads(text)
            step = int(line["step"])
        except (ValueError, KeyError, TypeError):
            continue
        if "left_out" in line:
            yield StepRecords(step, [], int(line.get("left_out") or 0))
            continue
        try:
            records = from_columns(line.get("columns") or {}, int(line["origin_ns"]), step, int(line["count"]))
        except (ValueError, KeyError, TypeError):
            continue
        yield StepRecords(step, records)


def _step_of(text: bytes) -> int | None:
    """The step of a line (its first key, as :class:`RecordFile` writes it) without decoding the rest."""
    head = text[:40]
    if not head.startswith(b'{"step":'):
        return None
    try:
        return int(head[8:head.index(b",")])
    except ValueError:
        return None


def read_run(run_dir: Path, steps: Iterable[int] | None = None) -> dict[int, StepRecords]:
    """Every step's records of a run (only ``steps``, when given; its files together: a step in several per-process
    files is joined)."""
    out: dict[int, StepRecords] = {}
    steps = None if steps is None else set(steps)
    for path in record_files(run_dir):
        for part in read_file(path, steps):
            kept = out.get(part.step)
            if kept is None:
                out[part.step] = part
            else:
                kept.records.extend(part.records)
                kept.left_out += part.left_out
    return out


# ------------------------------------------------------------------------------------------ the clock


ARRIVAL_TOLERANCE_NS = 1_000_000
"""How far before its (wall-clock) arrival an engine may, on the mapped monotonic clock, have queued a request
before :meth:`EngineClock.check` calls the mapping off."""
ARRIVAL_LIMIT_NS = 60_000_000_000
"""How far after arrival a request may be queued before the mapping is called off."""


class EngineClock:
    """An engine's monotonic clock (``time.monotonic()`` of its host, as vLLM's engine core stamps) mapped to the
    run's (``time.time_ns()``): the offset between the two, measured once (:meth:`measure`), the smallest of a few
    readings (the one least delayed between its two reads)."""

    __slots__ = ("offset_ns", "remapped")

    def __init__(self, offset_ns: int | None = None):
        self.offset_ns = self.measure() if offset_ns is None else offset_ns
        self.remapped = 0
        """How many times :meth:`check` found the mapping off and measured it again."""

    @staticmethod
    def measure(readings: int = 5) -> int:
        best = None
        for _ in range(readings):
            before = time.monotonic_ns()
            wall = time.time_ns()
            after = time.monotonic_ns()
            if best is None or after - before < best[0]:
                best = (after - before, wall - (before + after) // 2)
        return best[1]

    def monotonic(self, seconds: float | None) -> int | None:
        """A time of the engine's monotonic clock (float seconds; 0 or None: not stamped) on the run's clock."""
        return None if not seconds else int(seconds * 1e9) + self.offset_ns

    @staticmethod
    def wall(seconds: float | None) -> int | None:
        """A wall-clock time (``time.time()``; 0 or None: not stamped) on the run's clock."""
        return None if not seconds else int(seconds * 1e9)

    def check(self, records: Iterable[RequestRecord]) -> str | None:
        """Whether the mapping still holds for ``records`` (their wall-clock arrival against their mapped queue
        time); when it does not, the offset is measured again and the reason returned (to be said once)."""
        gaps = sorted(r.queued_ns - r.arrival_ns for r in records if r.queued_ns is not None and r.arrival_ns is not None)
        if not gaps:
            return None
        median = gaps[len(gaps) // 2]
        if -ARRIVAL_TOLERANCE_NS <= median <= ARRIVAL_LIMIT_NS:
            return None
        self.offset_ns = self.measure()
        self.remapped += 1
        return (f"the engine's monotonic clock, mapped to the run's, put requests in its queue {median / 1e6:+.1f} ms "
                f"after their wall-clock arrival: its offset was measured again (the engine runs on another host, or "
                f"the wall clock was stepped)")
