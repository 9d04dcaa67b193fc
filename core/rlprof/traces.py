"""Readers of the trace formats backends write, for ``rlprof report``: how long each named range took.

One small function per format, chosen by the file's name (:data:`READERS`). A reader returns
``{range name: Range}`` for the user ranges it finds (the role regions the backends marked, e.g.
``actor_update``); formats nobody can read here (``.nsys-rep``, memory snapshots) have no reader and
show up in reports with their size only. Adding a format is adding a function and a pattern.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

MAX_FILES_IN_DIRECTORY = 64
"""An artifact that is a directory (an NPU profile) is searched for readable files, up to this many."""


@dataclass
class Range:
    """All occurrences of one named range in a capture: total duration and how many there were."""

    total_us: float = 0.0
    count: int = 0

    @property
    def ms(self) -> float:
        return self.total_us / 1000.0

    def add(self, other: "Range") -> None:
        self.total_us += other.total_us
        self.count += other.count


def read_chrome_trace(path: Path) -> dict[str, Range]:
    """A Chrome trace (torch.profiler ``*.pt.trace.json[.gz]``, torch_npu ``trace_view.json``):
    the complete events of category ``user_annotation`` (what ``record_function`` and the
    profilers' range markers produce), summed per name. GPU-side copies of the same ranges
    (``gpu_user_annotation``) are left out so nothing is counted twice."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    events = data.get("traceEvents", []) if isinstance(data, Mapping) else data
    ranges: dict[str, Range] = {}
    for event in events:
        if not isinstance(event, Mapping) or event.get("ph") != "X" or event.get("cat") != "user_annotation":
            continue
        ranges.setdefault(str(event.get("name")), Range()).add(Range(float(event.get("dur", 0.0)), 1))
    return ranges


READERS: tuple[tuple[str, Callable[[Path], dict[str, Range]]], ...] = (
    ("*.trace.json.gz", read_chrome_trace),
    ("*.trace.json", read_chrome_trace),
    ("trace_view.json", read_chrome_trace),
)
"""``(file name pattern, reader)``, first match wins."""


def reader_for(path: Path) -> Callable[[Path], dict[str, Range]] | None:
    for pattern, reader in READERS:
        if fnmatch.fnmatch(path.name, pattern):
            return reader
    return None


def readable_files(path: Path) -> list[Path]:
    """The files under an artifact (itself, or inside it when it is a directory) that have a reader."""
    if path.is_file():
        return [path] if reader_for(path) else []
    if not path.is_dir():
        return []
    found = [p for p in sorted(path.rglob("*")) if p.is_file() and reader_for(p)]
    return found[:MAX_FILES_IN_DIRECTORY]


def read_ranges(path: Path) -> dict[str, Range]:
    """Every named range in the artifact at ``path``, summed over its readable files.

    :raises OSError, ValueError: a file exists but cannot be read or parsed.
    """
    total: dict[str, Range] = {}
    for file in readable_files(path):
        for name, found in reader_for(file)(file).items():
            total.setdefault(name, Range()).add(found)
    return total
