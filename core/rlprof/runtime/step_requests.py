"""The rollout's request records where a run's steps meet: each record to its step, each step's records to the file.

A :class:`~rlprof.runtime.step_book.StepBook` holds one :class:`StepRequests` and calls it under its own lock
(so nothing here locks). Records arrive with the processes' batches (``Batch.requests``) or from the driver
itself; **a record belongs to the step it names, else to the step whose window holds its arrival** (its start,
its end, where the source gives no arrival): the rule region timings follow, on the same wall clock. A record
that names a step already written (a process the book heard of only after it wrote the step: verl's in-process vLLM
server, whose first batches waited for the run's mailbox) is still kept in the run's file, in a line of its own
(:attr:`StepRequests.after`), though the step's figures were written without it; one that no window can hold is left
out and counted (:attr:`StepRequests.late`).
When the book writes a step, the step's records become its figures (:func:`rlprof.request_figures.request_figures`)
and one line of the run's records file (:class:`rlprof.request_records.RecordFile`, within the budget).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rlprof.config.values import DEFAULT_REQUEST_RECORDS_MB
from rlprof.request_figures import RequestFigures, request_figures
from rlprof.request_records import FILE, PROCESS_DIR, RecordFile, joined
from rlprof.step_metrics import FILE as METRICS_FILE


ON_CALLER = 1000
"""A trainer's logger that asks for a step's figures before its line is written (:meth:`StepBook.for_tracker`) waits
for the line when the step has more request records than this, rather than compute their figures on its own thread
(10,000 requests: 61 ms here; bench/bench_request_report.py measures the driver's side)."""


def records_path(metrics_path: Path, root: Path) -> Path:
    """Where the records go beside a step metrics file: the run's (``rollout_requests.jsonl.gz``) beside the run's,
    a process's own (``rollout_requests/<process>.jsonl.gz``) beside a process's."""
    if metrics_path.name == METRICS_FILE:
        return metrics_path.parent / FILE
    return root / PROCESS_DIR / (metrics_path.name.removesuffix(".jsonl") + ".jsonl.gz")


class StepRequests:
    """One run's request records at its driver (see the module doc).

    :param path: the records file (None: none written); ``root`` the run directory it is written under.
    :param records_mb: its budget (0: no limit)."""

    def __init__(self, path: Path | None, root: Path | None, records_mb: float = DEFAULT_REQUEST_RECORDS_MB):
        self.path, self.root, self.records_mb = path, root, records_mb
        self.loose: list[Any] = []
        """Records whose step's window has not begun yet."""
        self.late = 0
        """Records that came after their step was written, or that no step holds (left out)."""
        self.file: RecordFile | None = None
        """The run's records file, made at the first step that has records."""
        self._written = 0
        self._written_end_ns = 0
        self.after: dict[int, list[Any]] = {}
        """Records naming a step already written, to be appended to the file (:meth:`keep_after`)."""
        self.kept_after = 0
        """How many such records the file got."""
        self._origins: dict[int, int] = {}

    def add(self, records: Iterable[Any]) -> None:
        self.loose.extend(records)

    def assign(self, windows: dict[int, list[Any]]) -> None:
        """Give each loose record to its step's window (``windows[step][4]``: the book's list of the step's records)."""
        if not self.loose:
            return
        ordered = sorted(windows.items(), key=lambda item: item[1][0])
        kept = []
        for record in self.loose:
            step = record.step
            if step is None:
                at = next((t for t in (record.arrival_ns, record.start_ns, record.end_ns) if t is not None), None)
                for number, window in ordered:
                    if at is not None and window[0] <= at and (window[1] is None or at <= window[1]):
                        step = number
                if step is None:
                    if at is None or at <= self._written_end_ns or (ordered and at < ordered[-1][1][0]):
                        self.late += 1  # before or between the windows still open: no step holds it
                    else:
                        kept.append(record)  # its window may not have begun yet
                    continue
            window = windows.get(step)
            if window is not None:
                window[4].append(record)
            elif step <= self._written:
                self.after.setdefault(step, []).append(record)
            else:
                kept.append(record)
        self.loose = kept

    def written(self, step: int, end_ns: int | None) -> None:
        """The book wrote ``step`` (or dropped it, never ended): a record of it now comes too late."""
        self._written = max(self._written, step)
        if end_ns is not None:
            self._written_end_ns = max(self._written_end_ns, end_ns)

    @staticmethod
    def many(window: list[Any] | None) -> bool:
        """A step not written yet (its book's window) with more request records than :data:`ON_CALLER`."""
        return window is not None and len(window[4]) > ON_CALLER

    def figures(self, step: int, records: list[Any]) -> RequestFigures | None:
        return request_figures(step, joined(records)) if records else None

    def keep(self, step: int, origin_ns: int, records: list[Any]) -> tuple[RequestFigures | None, int]:
        """``step`` is written: its records appended to the run's file (the book's pump thread, never the training's).
        Its figures (None: it has no records) and how many records the file holds of it (0: left out)."""
        if self.path is None or not records:
            return self.figures(step, records), 0
        records = joined(records)  # a request's parts from several sources (an engine's, a framework's) as one
        kept = self._file().write(step, origin_ns, records)
        self._origins[step] = origin_ns
        return self.figures(step, records), len(records) if kept else 0

    def keep_after(self, lock: Any) -> None:
        """Append the records naming steps written already to the run's file (the book's pump thread; ``lock``, the
        book's, held while they are taken): a line of their own a step, which readers join with the step's
        (:func:`rlprof.request_records.read_run`); counted, never dropped where the file can take them."""
        with lock:
            after, self.after = self.after, {}
        for step, records in sorted(after.items()):
            self._keep_after(step, records)

    def _keep_after(self, step: int, records: list[Any]) -> None:
        if self.path is None or not records:
            self.late += len(records)
            return
        records = joined(records)
        origin = self._origins.get(step)
        if origin is None:
            origin = min((t for r in records for t in (r.arrival_ns, r.start_ns, r.end_ns) if t is not None), default=0)
        if self._file().write(step, origin, records):
            self.kept_after += len(records)
        else:
            self.late += len(records)

    def _file(self) -> RecordFile:
        """The run's records file, made at the first step that has records."""
        if self.file is None:
            self.file = RecordFile(self.path, self.root or self.path.parent, int(self.records_mb * 1e6))
        return self.file

    def close(self) -> None:
        self.late += len(self.loose) + sum(len(records) for records in self.after.values())  # their step never came
        self.after = {}
        self.loose = []
        if self.file is not None:
            self.file.close()
