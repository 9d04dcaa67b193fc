"""A folder walked for trace files: every file an installed reader claims, and every other one named with the reason it is passed over."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from rlprof.analysis.trace_readers import claim
from rlprof.hookspecs import TraceReader
from rlprof.layout import CORE_DIRS, MANIFEST_DIR

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
