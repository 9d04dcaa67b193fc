"""The manifest: one JSON-lines file per process, merged on read.

Each line is a record with a ``type``:

* ``process``  — written at Profiler creation on a process that will profile: run, rank, world size,
  host, pid, roles, selected roles, steps, mode, tools, save_path. Lets a report say what was expected.
* ``artifact`` — one file or directory a backend produced: run, step(s), role(s), region, rank, host,
  pid, backend, capture, path (relative to the run directory), size in bytes, kind, iterations.
* ``error``    — a backend hook that raised: backend, hook, rank, message.
* ``finalized``— the process finalized (reason). Its absence means the process died first.
* ``worker_failure`` — written by the Ray controller (``manifest/controller-<host>-<pid>.jsonl``) for a
  worker that died, hung past the timeout or raised in an rlprof call (see :mod:`rlprof.ray`).

The ``process`` record also carries ``environment``: what each backend said it lacks on that machine
(``check_environment``), so a report shows "cannot capture here" instead of "missing".

Lines are appended and flushed as they happen, so a process killed mid-run keeps what it recorded.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Iterator


def path_size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    try:
        return path.stat().st_size
    except OSError:
        return 0


class ManifestWriter:
    """Appends records to one process's manifest; each line is flushed as it is written, so a process
    killed later keeps everything it recorded. The file stays open (one open per process, not per line)."""

    def __init__(self, path: Path, common: dict[str, Any]):
        self.path = path
        self.common = common
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = None

    def write(self, record_type: str, **fields: Any) -> None:
        record = {"type": record_type, **self.common, **fields, "time": round(time.time(), 3)}
        line = json.dumps(record, default=str)
        if self._handle is None or self._handle.closed:
            self._handle = open(self.path, "a", encoding="utf-8")
        self._handle.write(line + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


def manifest_files(paths: Iterable[os.PathLike | str]) -> list[Path]:
    """Every process manifest under the given save paths (or run directories), sorted."""
    found: set[Path] = set()
    for base in paths:
        base = Path(base)
        if base.is_file() and base.suffix == ".jsonl":
            found.add(base)
            continue
        found.update(p for p in base.rglob("manifest/*.jsonl"))
    return sorted(found)


def read_records(paths: Iterable[os.PathLike | str]) -> Iterator[dict[str, Any]]:
    """All records of all manifests under ``paths``; each gets ``_manifest`` and ``_run_dir``."""
    for file in manifest_files(paths):
        run_dir = file.parent.parent
        with open(file, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed process
                record["_manifest"] = str(file)
                record["_run_dir"] = str(run_dir)
                yield record


def artifacts(paths: Iterable[os.PathLike | str]) -> list[dict[str, Any]]:
    return [r for r in read_records(paths) if r.get("type") == "artifact"]
