"""The breakdown rows of trace files, read in a process pool, cached where the layout says (never beside a file).

``rlprof breakdown PATH...`` (:mod:`rlprof.cli.breakdown`) reads them here, or with ``--address`` on the nodes of
a Ray cluster that hold them (:mod:`rlprof.cli.breakdown_cluster`, which runs :func:`read_here` on each node).

Each file goes to the reader of the backend that writes its format (each backend names it through the
``trace_reader`` hook, :func:`readers`), in a pool of
worker processes; a worker returns only the rows and the file's collective calls (kilobytes),
which are matched across ranks here (:func:`rlprof.analysis.breakdown.apportion_waits`). A file that
cannot be read costs one line naming it and the reason; every other file is still reported.

The rows of a file are cached, keyed to the file's size and mtime, so a second run reads no trace:
in its run's own ``breakdown/`` folder, or for a file in no run in the cache folder
(:func:`rlprof.layout.rows_path`); never beside the file, whose folder holds only what the backends
wrote. On a Ray run the node that holds a trace writes that cache, and the same bytes are shipped to the controller
(:func:`rlprof.layout.shipped_rows_path`); :func:`shipped` reads them there when the trace is not.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from rlprof.analysis.breakdown import Collective, TraceEvents, apportion_waits, split
from rlprof.row_model import Row, rows_version
from rlprof import plugins
from rlprof.hookspecs import TraceReader
from rlprof.layout import CORE_DIRS, MANIFEST_DIR, ROWS_SUFFIX, new_file, rows_path
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


