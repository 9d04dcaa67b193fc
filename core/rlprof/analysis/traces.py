"""Chrome traces written by backends, read for ``rlprof timeline --with-traces``: which files, their events and wall clock.

Which files are Chrome traces is each backend's own reader's word (:class:`TraceFiles`: the patterns of its
``trace_reader`` hook, where it says ``chrome=True``), so a trace kind a plugin adds is merged too and no
second list of file names exists. Where each event lies on the clock the manifest uses
(``time.time_ns()``, shared by the processes of a host):

* Kineto (torch.profiler >= 2.1) writes ``baseTimeNanoseconds`` at the top of the trace and every
  ``ts`` in microseconds relative to it: wall ns = ``baseTimeNanoseconds + ts * 1000``.
* Older Kineto wrote ``ts`` as microseconds since the Unix epoch (no ``baseTimeNanoseconds``).
* A trace with neither (another tool's export) is aligned on one of rlprof's own ranges: the first
  ``user_annotation`` event named like a region the manifest recorded for the same capture is put
  at that region's ``start_ns``.

:func:`clock_offset_ns` returns the offset to add to ``ts * 1000``; :func:`load_trace` reads a file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from rlprof.analysis.trace_readers import claimant, readers
from rlprof.hookspecs import TraceReader

EPOCH_US = 1e14
"""``ts`` values above this (1973 in microseconds since the epoch) are absolute wall-clock times."""


class TraceFiles:
    """What the backends of a run say of the files they wrote: which are traces their own reader claims (by
    the patterns of their ``trace_reader`` hook, :func:`rlprof.analysis.trace_readers.claim`'s rule), which
    of those are Chrome traces, and where a person opens them. Only each file's own backend is asked: a
    profile another tool wrote (py-spy's ``*.speedscope.json``) is nobody's trace."""

    def __init__(self, backends: Iterable[str]):
        self.readers, self.problems = readers(sorted(set(backends)))

    def claimed(self, backend: str, path: Path) -> tuple[TraceReader, str] | None:
        """``(reader, pattern)`` when ``backend``'s reader claims the file ``path``, else None."""
        reader = self.readers.get(backend)
        found = claimant(path, {backend: reader}) if reader is not None else None
        return (reader, found[1]) if found is not None else None

    def is_chrome(self, backend: str, path: Path) -> bool:
        found = self.claimed(backend, path)
        return found is not None and found[0].chrome

    def chrome_traces(self, backend: str, path: Path, limit: int = 64) -> list[Path]:
        """The Chrome traces an artifact of ``backend`` holds: itself, or up to ``limit`` inside it when it is a directory."""
        if path.is_file():
            return [path] if self.is_chrome(backend, path) else []
        if not path.is_dir():
            return []
        return [p for p in sorted(path.rglob("*")) if p.is_file() and self.is_chrome(backend, p)][:limit]


def load_trace(path: Path) -> dict[str, Any]:
    """The trace as ``{"traceEvents": [...], ...}`` (a bare list of events is wrapped).

    :raises OSError, ValueError: unreadable, not JSON (``json.JSONDecodeError`` is a ValueError)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    if isinstance(data, list):
        return {"traceEvents": data}
    if not isinstance(data, Mapping) or not isinstance(data.get("traceEvents", []), list):
        raise ValueError("not a Chrome trace (no traceEvents list)")
    return dict(data)


def clock_offset_ns(trace: Mapping[str, Any], anchors: Mapping[str, int]) -> tuple[int, str] | None:
    """``(offset, how)`` such that an event's wall-clock ns is ``offset + ts * 1000``, or None when
    the trace gives no way to tell.

    :param anchors: region name -> wall-clock ``start_ns`` of its first occurrence in this capture
        (from the manifest), used only for traces without a clock of their own.
    """
    base = trace.get("baseTimeNanoseconds")
    if isinstance(base, (int, float)) and base > 0:
        return int(base), "baseTimeNanoseconds"
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, Mapping) and isinstance(e.get("ts"), (int, float))]
    if events and min(e["ts"] for e in events) > EPOCH_US:
        return 0, "epoch microseconds"
    firsts: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and e.get("name") in anchors:
            name = e["name"]
            firsts[name] = min(firsts.get(name, e["ts"]), e["ts"])
    if firsts:
        name = min(firsts, key=lambda n: anchors[n])
        return anchors[name] - int(firsts[name] * 1000), f"aligned on {name}"
    return None
