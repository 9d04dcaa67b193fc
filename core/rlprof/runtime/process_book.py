"""A plain :class:`~rlprof.Profiler`'s step book: the process is its own driver (no Ray controller, no verl trainer).

Each process's colocated Profilers share one :class:`~rlprof.runtime.step_book.StepBook` (:func:`process_book`),
fed by their :class:`ProcessSink` on their own step windows; it closes when the last of them is final.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Iterable

from rlprof.config.values import DEFAULT_REQUEST_RECORDS_MB
from rlprof.runtime.step_book import StepBook
from rlprof.step_metrics import FILE, PROCESS_DIR


_books: dict[tuple[str, int, int], tuple[StepBook, set[str]]] = {}
"""(run id, rank, pid) -> the process's book and the processes (Profilers) still sending to it."""
_books_lock = threading.Lock()


def process_book(run: Any, tools: Iterable[str], records_mb: float = DEFAULT_REQUEST_RECORDS_MB) -> StepBook:
    """The book of a plain Profiler's process (its colocated Profilers share it), on its own windows. A process
    that is the whole run (``world_size`` 1) writes the run's file and calls the ``step_metrics`` hook; one of
    several ranks that no driver combines writes its own figures under ``step_metrics/`` and calls no hook
    (each rank's figures under the same names would overwrite one another in a sink)."""
    key = (run.run_id, run.rank, os.getpid())
    with _books_lock:
        found = _books.get(key)
        if found is None:
            from rlprof.layout import process_tag

            whole = run.world_size == 1
            path = run.run_dir / FILE if whole else run.run_dir / PROCESS_DIR / f"{process_tag(run.rank, run.host, run.pid)}.jsonl"
            found = _books[key] = (StepBook(path, run.run_id, tools if whole else None, own_windows=True, root=run.run_dir,
                                            records_mb=records_mb), set())
        return found[0]


class ProcessSink:
    """A plain Profiler's sink: its process's :func:`process_book`, made at the first batch (never for a
    Profiler whose timings an integration sends elsewhere). Each batch is pumped at once; when the last
    Profiler of the process that sent to it is final, the book closes."""

    def __init__(self, run: Any, tools: Iterable[str], process: str, records_mb: float = DEFAULT_REQUEST_RECORDS_MB):
        self.run, self.tools, self.process, self.records_mb = run, tuple(tools), process, records_mb
        self.book: StepBook | None = None

    def send(self, batch: Any) -> None:
        key = (self.run.run_id, self.run.rank, os.getpid())
        if self.book is None:
            self.book = process_book(self.run, self.tools, self.records_mb)
            with _books_lock:
                _books[key][1].add(id(self))
        book = self.book
        with book.sending:  # the flusher's batch and finalize's last one, one at a time: nothing after the close
            if book.closed:
                return
            book.receive(batch)
            book.pump()
            if batch.final:
                with _books_lock:
                    senders = _books[key][1] if key in _books else set()
                    senders.discard(id(self))
                    last = not senders
                    if last:
                        _books.pop(key, None)
                if last:
                    book.close()
