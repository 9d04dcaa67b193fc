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

def readers(names: Iterable[str] | None = None) -> tuple[dict[str, TraceReader], list[str]]:
    """Backend name -> its :class:`TraceReader`, asked through the ``trace_reader`` hook of the installed
    backends (only ``names`` when given: the backends whose files are being read), and one line, in the
    plugin loader's shape, for each backend that failed to answer."""
    found, problems = plugins.implementations("trace_reader", names)
    answers: dict[str, TraceReader] = {}
    lines = [line for _, line in problems]
    for implementation in found:
        try:
            reader = implementation.call()
        except Exception as exc:
            lines.append(implementation.problem(f"trace_reader raised {type(exc).__name__}: {exc}"))
            continue
        if isinstance(reader, TraceReader):
            answers[implementation.owner] = reader
        elif reader is not None:
            lines.append(implementation.problem(f"trace_reader returned {reader!r}, not a rlprof.hookspecs.TraceReader"))
    return answers, lines


CACHE_SUFFIX = ROWS_SUFFIX
CACHE_VERSION = rows_version()
"""The rows' columns and definitions (:func:`rlprof.row_model.rows_version`); rows made by another
version are made again: a column added to the row model, or a definition changed, invalidates old caches by itself."""
WORKERS = 2


@dataclass
class FileRows:
    """What a worker sends back for one file: its rows and what matching its collectives needs."""

    trace: TraceEvents
    """Without its event columns: path, rank, device, group, clock and collectives only."""
    rows: list[Row]


def reader_for(path: Path, answers: Mapping[str, TraceReader]) -> str | None:
    """The target of the reader that claims ``path`` (:func:`claim`), or None."""
    return claim(path, answers)[0]


NO_READER = "no installed reader reads this kind of file"
OWN_MARK = ".rlprof-"
"""What rlprof's own derived files carry in their names (:data:`rlprof.layout.ROWS_SUFFIX`, rlprof-nsys's
export suffix); an older rlprof kept them beside the traces."""


def claim(path: Path, answers: Mapping[str, TraceReader]) -> tuple[str | None, str]:
    """Which reader reads ``path``, asked of every installed reader's own patterns (pytest's collector asks
    each plugin the same way): ``(target, "")``, or ``(None, why no reader reads it)``.

    Among the patterns that match the file's name, the one with the most literal characters wins
    (``trace_view.json`` over ``*.json``); a backend's :attr:`~rlprof.hookspecs.TraceReader.not_traces`
    compete the same way, so ``profiler_info_0.json`` is torch_npu's metadata, not a Kineto trace."""
    if OWN_MARK in path.name:
        return None, "rlprof's own file (an older rlprof kept its caches beside the traces; safe to delete)"
    best = _best(path, answers)
    if best is None:
        return None, NO_READER
    _, claims, target, backend, pattern = best
    if claims:
        return target, ""
    return None, f"{backend} writes it beside its traces ({pattern}): not a trace"


def claimant(path: Path, answers: Mapping[str, TraceReader]) -> tuple[str, str] | None:
    """``(backend, pattern)`` of the reader that claims ``path`` (:func:`claim`'s rule), or None."""
    best = _best(path, answers) if OWN_MARK not in path.name else None
    return (best[3], best[4]) if best is not None and best[1] else None


def _best(path: Path, answers: Mapping[str, TraceReader]) -> tuple[int, int, str, str, str] | None:
    """The pattern that decides ``path``: ``(literal characters, 1 a claim / 0 not a trace, target, backend,
    pattern)``, the most literal first; None when no pattern matches."""
    best = None
    for backend, reader in answers.items():
        for pattern in reader.patterns:
            if fnmatch.fnmatch(path.name, pattern):
                best = max(best or (-1, 0, "", "", ""), (_literal(pattern), 1, reader.target, backend, pattern))
        for pattern in reader.not_traces:
            if fnmatch.fnmatch(path.name, pattern):
                best = max(best or (-1, 0, "", "", ""), (_literal(pattern), 0, "", backend, pattern))
    return best


def _literal(pattern: str) -> int:
    return len(pattern.replace("*", "").replace("?", ""))


@dataclass
class Collected:
    """What :func:`collect` found: the files to read, and each file or folder passed over with the reason."""

    files: list[Path]
    skipped: list[tuple[str, str]]


def collect(paths: Sequence[str], answers: Mapping[str, TraceReader]) -> Collected:
    """The files named, and every file inside the folders named that an installed reader claims
    (:func:`claim`: the readers' own patterns, a plugin's new kind included), each once. Every other
    file in those folders is named with the reason it is passed over, and so are a run's own folders
    (``manifest/``, ``budget/``, ``breakdown/``: rlprof's records and caches, not traces), links to
    folders (not followed) and a folder with no file at all: nothing is passed over in silence."""
    files: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for name in paths:
        path = Path(name)
        if not path.is_dir():
            files.append(path)  # named: read, or its reason said by breakdown()
            continue
        seen = 0
        for directory, folders, names in os.walk(path):
            here = Path(directory)
            own = set(CORE_DIRS) if MANIFEST_DIR in folders else set()  # a run directory
            for folder in sorted(folders):
                if folder in own:
                    skipped.append((str(here / folder), f"rlprof's own folder ({folder}), not traces"))
                elif (here / folder).is_symlink():
                    skipped.append((str(here / folder), "a link to a folder, not followed"))
            folders[:] = sorted(f for f in folders if f not in own and not (here / f).is_symlink())
            for file in sorted(names):
                seen += 1
                target, why = claim(here / file, answers)
                if target is not None:
                    files.append(here / file)
                else:
                    skipped.append((str(here / file), why))
        if not seen:
            skipped.append((str(path), "no file in this folder"))
    return Collected(list(dict.fromkeys(files)), skipped)


def readers_line(answers: Mapping[str, TraceReader]) -> str:
    """What the installed readers read, in one line (said once when a file no reader reads was passed over)."""
    return "; ".join(f"{backend}: {', '.join(reader.patterns)}" for backend, reader in sorted(answers.items()))


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


