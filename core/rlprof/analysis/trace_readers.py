"""Which installed reader reads a trace file: the backends' ``trace_reader`` hooks, and the one rule that picks among their patterns.

Each file goes to the reader of the backend that writes its format (each backend names it through the
``trace_reader`` hook, :func:`readers`); among the patterns that match a file's name the most literal wins
(:func:`claim`). These patterns are the only list of trace file names: ``rlprof breakdown``, the report's
split, ``rlprof timeline --with-traces`` (:class:`rlprof.analysis.traces.TraceFiles`) and the demo ask here.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Iterable, Mapping

from rlprof import plugins
from rlprof.hookspecs import TraceReader

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


def readers_line(answers: Mapping[str, TraceReader]) -> str:
    """What the installed readers read, in one line (said once when a file no reader reads was passed over)."""
    return "; ".join(f"{backend}: {', '.join(reader.patterns)}" for backend, reader in sorted(answers.items()))
