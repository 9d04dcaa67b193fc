"""The breakdown rows of trace files, read in a pool of worker processes, each file from its cache when current.

``rlprof breakdown PATH...`` (:mod:`rlprof.cli.breakdown`) reads them here, or with ``--address`` on the nodes of
a Ray cluster that hold them (:mod:`rlprof.cli.breakdown_cluster`, which runs :func:`read_here` on each node).

Each file goes to the reader of the backend that writes its format (:mod:`rlprof.analysis.trace_readers`), in a
pool of worker processes; a worker returns only the rows and the file's collective calls (kilobytes), which are
matched across ranks here (:func:`rlprof.analysis.breakdown.apportion_waits`). A file that cannot be read costs
one line naming it and the reason; every other file is still reported. The rows are kept where the layout says
(:mod:`rlprof.analysis.rows_cache`), so a second run reads no trace; a folder is walked by
:mod:`rlprof.analysis.trace_walk`.
"""

from __future__ import annotations

import importlib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Mapping, Sequence

from rlprof.analysis.breakdown import TraceEvents, apportion_waits, split
from rlprof.analysis.rows_cache import FileRows, _cached, _store, _without_events
from rlprof.analysis.trace_readers import claim, readers
from rlprof.analysis.trace_walk import collect
from rlprof.hookspecs import TraceReader
from rlprof.row_model import Row

WORKERS = 2


def file_rows(path: str, target: str) -> FileRows:
    """Read one file (in a worker): from its cache when the file has not changed, else through ``target``."""
    cached = _cached(path)
    if cached is not None:
        return cached
    trace = _load(target)(path)
    result = FileRows(trace=_without_events(trace), rows=split(trace))
    _store(path, result)
    return result


def breakdown(paths: Sequence[Path], workers: int = WORKERS, answers: Mapping[str, TraceReader] | None = None,
              shipped: Sequence[FileRows] = ()) -> tuple[list[Row], list[tuple[str, str]]]:
    """Rows of every file (waits matched across the files' ranks, ``shipped`` ones included: rows of
    traces read on the node that holds them) and ``(path, reason)`` for those that failed;
    ``answers``: the readers to use (default: every installed backend's)."""
    if answers is None:
        answers, _ = readers()
    jobs, errors = [], []
    for path in paths:
        target, why = claim(path, answers)
        if not path.is_file():
            errors.append((str(path), "no such file"))
        elif target is None:
            errors.append((str(path), why))
        else:
            jobs.append((str(path), target))
    results: list[FileRows] = list(shipped)
    for (path, _), outcome in zip(jobs, _run(jobs, workers)):
        if isinstance(outcome, FileRows):
            results.append(outcome)
        else:
            errors.append((path, outcome))
    apportion_waits([(result.trace, result.rows) for result in results])
    return [row for result in results for row in result.rows], errors


def _run(jobs: list[tuple[str, str]], workers: int) -> list[FileRows | str]:
    if len(jobs) <= 1 or workers <= 1:
        return [_attempt(path, target) for path, target in jobs]
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        return list(pool.map(_attempt, *zip(*jobs)))


def _attempt(path: str, target: str) -> FileRows | str:
    """The file's rows, or the reason it has none (in one line: a bad file never stops the others)."""
    try:
        return file_rows(path, target)
    except MemoryError:
        return "too large to read here (out of memory)"
    except Exception as exc:  # truncated gzip (EOFError), bad JSON (ValueError), a reader's own error
        reason = str(exc).splitlines()[0] if str(exc) else ""
        return f"{type(exc).__name__}: {reason}"[:300]


def _load(target: str) -> Callable[[str], TraceEvents]:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def read_here(paths: list[str]) -> tuple[list[FileRows], list[tuple[str, str]], list[tuple[str, str]]]:
    """On the node holding ``paths`` (one task of ``rlprof breakdown --address``): their rows (one file at a time, from each one's cache when it
    is current), the reason for each file that has none, and what the walk of its folders passed over."""
    answers, _ = readers()
    collected = collect(paths, answers)
    results, errors = [], []
    for path in collected.files:
        target, why = claim(path, answers)
        outcome = _attempt(str(path), target) if target else why
        if isinstance(outcome, FileRows):
            results.append(outcome)
        else:
            errors.append((str(path), outcome))
    return results, errors, collected.skipped


