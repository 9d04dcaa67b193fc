"""Every region of a timed role, on every step, and how its timing leaves the training thread.

Why: the step metrics (:mod:`rlprof.step_metrics`) need every rank's time in every region of every
step, profiled or not, while a profiler must not slow the training it observes. So the training thread
does the least that can be done: a timed region's exit appends one tuple to a list its Profiler holds
(:class:`RegionTimes`), and ``start_step``/``step_boundary`` append the step's window. About a
microsecond a region (bench/bench_step_metrics.py). Nothing is sent, encoded or written there.

One daemon thread per process (:class:`Flusher`) takes what each list gained every :data:`FLUSH_S`
and hands it, as one :class:`Batch` per Profiler, to that Profiler's sink: for a plain Profiler its
process's own :class:`~rlprof.runtime.step_book.StepBook` (figures, the file, the hook); in a Ray worker
(:mod:`rlprof.integrations.step_mailbox`) the run's mailbox actor, which the driver reads. Taking is
``len`` then ``del lst[:n]``, both atomic under the interpreter lock, so the training thread never takes
a lock and an append that races the flusher stays for the next batch. A sink that raises loses that
batch (logged once), never the training. ``Profiler.finalize`` sends what is left, marked ``final``, after
any batch the flusher is still sending (at most :data:`FINAL_WAIT_S`): the final batch is the last one a
sink gets (a final batch that overtook the flusher's wrote step 2's line before step 1's).

The times are ``time.time_ns()``: the wall clock every process of a host shares (across hosts, as well as
NTP keeps them), since a driver that never told a worker its step gives the worker's regions to steps by
the driver's own step windows.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

log = logging.getLogger("rlprof")

FLUSH_S = 0.05
"""How often the flusher takes what the training threads timed: a region's time reaches its driver
within this (plus the transport) after it closed, well before verl's trainer logs the step."""
HEARTBEAT_S = 0.5
"""A process that timed nothing new still sends an empty batch this often, so its driver knows it has
passed the steps that ended meanwhile (a rank with no region in a step is not waited for forever). And once right
after a batch that carried something (the next flush, :data:`FLUSH_S` later): a worker whose last region of a step
ended just before the driver ended the step then says it has passed that end within a flush, not a heartbeat, which
the trainer's logger waited for (0.2-0.5 s a step in verl's V1 trainer). At most one more message per batch sent,
none while the process is idle."""
FINAL_WAIT_S = 5.0
"""How long ``finalize``'s last batch waits for one the flusher is still sending (a sink that hangs costs
the end of training this, never more)."""


@dataclass
class Batch:
    """What one Profiler timed since its last batch, and whose it is."""

    run_id: str
    process: str
    """``rank<R>-<host>-<pid>``: one process, the key a driver waits for."""
    rank: int
    timings: list[tuple[str, str, int, int]] = field(default_factory=list)
    """``(role, region, start_ns, end_ns)`` per region exit, in exit order (a driver gives each to the step
    whose window holds its start: one rule whether the process was told its steps or not)."""
    windows: list[tuple[int, int, int, bool]] = field(default_factory=list)
    """``(step, start_ns, end_ns, profiled)`` of the steps this Profiler began and ended (its caller told it
    the step; a plain Profiler's book uses them, a driver its own)."""
    through_ns: int = 0
    """Every region that ended before this wall-clock time is in this batch or an earlier one."""
    final: bool = False
    """The Profiler finalized: nothing more comes from it."""
    requests: list[Any] = field(default_factory=list)
    """The rollout requests this process's sources recorded (:class:`rlprof.request_records.RequestRecord`), each
    appended before the region that served it ended (so a batch complete through a step's end holds them)."""
    work: list[tuple[str, str, int, int, float, str, Any]] = field(default_factory=list)
    """``(role, region, at_ns, tokens, flops, formula, peak)`` per ``Profiler.record_tokens`` (:mod:`rlprof.step_work`)."""
    requests_only: bool = False
    """The process sends its driver request records only (a rollout replica's server, an agent-loop worker): a
    trainer's logger does not wait for it (:meth:`rlprof.runtime.step_book.StepBook.for_tracker`)."""
    splits: list[tuple[int, Any]] = field(default_factory=list)
    """This process's profiled steps' split (:mod:`rlprof.runtime.split_analyser`), in order: ``(step, None)``
    announces one file of ``step`` to be analysed; ``(step, {(role, region): figures})`` is one file's answer
    (empty: none). A driver waits for every file announced (:meth:`rlprof.runtime.step_book.StepBook.receive`)."""


class Sink(Protocol):
    """Where a Profiler's batches go (called on the flusher thread, or by ``finalize``)."""

    def send(self, batch: Batch) -> None: ...


class RegionTimes:
    """One Profiler's timings not sent yet: ``done`` and ``windows`` are appended to by the training
    thread only, taken by the flusher only (see the module doc)."""

    __slots__ = ("done", "windows", "requests", "work", "splits", "run_id", "process", "rank", "sink", "outlives",
                 "requests_only", "_last_sent", "_follow", "_closed", "sending", "__weakref__")

    def __init__(self, run_id: str, process: str, rank: int, sink: Sink):
        self.done: list[tuple[str, str, int, int]] = []
        self.windows: list[tuple[int, int, int, bool]] = []
        self.requests: list[Any] = []
        """Rollout request records (:meth:`rlprof.Profiler.record_requests`), appended by their source's thread."""
        self.work: list[tuple[str, str, int, int, float, str, Any]] = []
        """Appended to by the training thread's ``Profiler.record_tokens``, taken by the flusher."""
        self.splits: list[tuple[int, Any]] = []
        """Appended to by the process's split analyser (announcements on the training thread, answers on its
        own), taken by the flusher."""
        self.run_id, self.process, self.rank = run_id, process, rank
        self.sink: Sink = sink
        """Replaced by an integration before the first region (a Ray worker's: the run's mailbox)."""
        self.requests_only = False
        """Only request records (and how far it has sent) leave this process, not its region timings or splits
        (:attr:`Batch.requests_only`; set with the sink): a rollout replica's server, an agent-loop worker."""
        self.outlives = False
        """The timings go on after the Profiler finalizes (set with a driver's sink: a driver's run goes on
        after a worker's profiling ended, verl's workers finalize at the last profiled step); its finalize
        then sends what is left without ``final``, and its regions stay timed."""
        self._last_sent = 0.0
        self._follow = False
        """The last batch carried something: the next take sends one even if empty (see :data:`HEARTBEAT_S`)."""
        self._closed = False
        self.sending = threading.Lock()
        """Held while a batch is taken and sent (the flusher's thread or ``flush``): batches reach the sink in order."""

    def take(self, final: bool = False, now: Callable[[], float] = time.monotonic) -> Batch | None:
        """What was timed since the last call, as a batch; None when nothing was and no heartbeat is due."""
        through = time.time_ns()  # before taking: a region ending after this is left for the next batch
        n, w, s, r, k = len(self.done), len(self.windows), len(self.splits), len(self.requests), len(self.work)
        carries = bool(n or w or s or r or k)
        if not (carries or final or self._follow) and now() - self._last_sent < HEARTBEAT_S:
            return None
        self._follow = carries
        timings, windows, splits = self.done[:n], self.windows[:w], self.splits[:s]
        requests, work = self.requests[:r], self.work[:k]
        del self.done[:n]
        del self.windows[:w]
        del self.splits[:s]
        del self.requests[:r]
        del self.work[:k]
        self._last_sent = now()
        if self.requests_only:  # its region timings and splits stay here (taken above, so they do not pile up)
            timings, splits = [], []
        return Batch(self.run_id, self.process, self.rank, timings, windows, through, final, requests=requests, work=work,
                     requests_only=self.requests_only, splits=splits)

    def add_splits(self, splits: list[tuple[int, Any]]) -> bool:
        """Append what the split analyser says (see :attr:`Batch.splits`); False once this Profiler's last
        batch went (the analyser then gives it to another Profiler of the process)."""
        if self._closed:
            return False
        self.splits.extend(splits)
        return True

    def flush(self, final: bool = False) -> None:
        """Send what is left now (``Profiler.finalize``: ``final``), on the caller's thread."""
        if self._closed:
            return
        if final:
            self._closed = True
            FLUSHER.forget(self)
        held = self.sending.acquire(timeout=FINAL_WAIT_S)  # after a batch the flusher is still sending
        try:
            batch = self.take(final=final)
            if batch is not None:
                _send(self, batch)
        finally:
            if held:
                self.sending.release()


def _send(times: RegionTimes, batch: Batch) -> None:
    try:
        times.sink.send(batch)
    except Exception as exc:  # a profiler never fails the training over its metrics
        from rlprof.notices import say_once

        say_once(f"step timings: {type(times.sink).__name__}", log,
                 "rlprof: step timings of %s could not be sent (%s: %s); the step metrics miss them, training goes on",
                 times.process, type(exc).__name__, exc)


class Flusher:
    """The process's one thread that sends every Profiler's timings (started with the first one)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._members: "weakref.WeakSet[RegionTimes]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def add(self, times: RegionTimes) -> None:
        with self._lock:
            if self.pid != os.getpid():  # a forked child: its parent's thread is not running here
                self.pid, self._thread, self._members = os.getpid(), None, weakref.WeakSet()
            self._members.add(times)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rlprof-step-timings", daemon=True)
                self._thread.start()

    def forget(self, times: RegionTimes) -> None:
        with self._lock:
            self._members.discard(times)

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_S)
            self._wake.clear()
            with self._lock:
                members = list(self._members)
            for times in members:
                with times.sending:
                    if times._closed:  # its final batch went (flush): nothing may follow it
                        continue
                    try:
                        batch = times.take()
                    except Exception:  # never kill the thread
                        continue
                    if batch is not None:
                        _send(times, batch)


FLUSHER = Flusher()


def now_ns() -> int:
    """The clock of every timing (a name tests can replace)."""
    return time.time_ns()


def register(times: RegionTimes) -> RegionTimes:
    FLUSHER.add(times)
    return times
