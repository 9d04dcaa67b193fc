"""Writing a process's manifest: one JSON-lines file, appended and flushed as records happen, never raising into training.

A failed write (disk full) is logged once, counted, and recorded as an ``error`` of kind ``write`` once
writing works again. :func:`record_relocation` appends a moved file's record to the manifest that listed it.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from rlprof.layout import relative
from rlprof.manifest.records import record_fields

log = logging.getLogger("rlprof")

_ENCODER = json.JSONEncoder(default=str, check_circular=False)
"""One encoder for every record (``json.dumps(..., default=str)`` builds a new one per call). Records
are plain data; anything else (a path, an exception) is written as its ``str``."""


def path_size(path: os.PathLike | str) -> int:
    """Bytes in a file, or in all files under a directory; 0 when it cannot be read."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
        return info.st_size
    except OSError:
        return 0


class ManifestWriter:
    """Appends records to one process's manifest; each line is flushed as it is written, so a process
    killed later keeps everything it recorded. The file stays open (one open per process, not per line),
    is opened without following symbolic links under ``root``, and is only ever appended to.

    :meth:`write` never raises: an ``OSError`` (disk full, file removed, directory made read-only) is
    logged once, counted in :attr:`lost`, and reported by an ``error`` record (kind ``write``) as soon
    as a later write succeeds."""

    def __init__(self, path: Path, common: dict[str, Any], root: Path | None = None):
        self.path = path
        self.common = common
        self.root = root if root is not None else path.parent
        self.lost = 0
        """Records that could not be written."""
        self._handle = None
        self._problem: str | None = None
        self._told = False
        self._lock = threading.Lock()
        """Records also come from the hook watchdog's thread while training holds the Profiler's lock."""

    def write(self, record_type: str, **fields: Any) -> bool:
        """Append one record; False when it could not be written (never raises)."""
        with self._lock:
            return self._write([self._line(record_type, **fields)])

    def write_record(self, record: Any) -> bool:
        """Append one typed record (:class:`ProcessRecord`...): its ``TYPE`` and its fields."""
        return self.write(record.TYPE, **record_fields(record))

    def write_many(self, records: Iterable[tuple[str, dict[str, Any]]]) -> bool:
        """Append ``(type, fields)`` records in one write and one flush (a step's timing records)."""
        with self._lock:
            lines = [self._line(record_type, **fields) for record_type, fields in records]
            return self._write(lines) if lines else True

    def _write(self, lines: list[str]) -> bool:
        if self._problem is not None and self._append(self._line("error", kind="write", backend=None, hook=None,
                                                                  error=self._problem, lost=self.lost)):
            self._problem = None
        if self._append("\n".join(lines)):
            return True
        self.lost += len(lines)
        return False

    def _line(self, record_type: str, **fields: Any) -> str:
        record = {"type": record_type, **self.common, **fields, "time": round(time.time(), 3)}
        return _ENCODER.encode(record)

    def _append(self, line: str) -> bool:
        try:
            if self._handle is None or self._handle.closed:
                self._handle = _open_append(self.path, self.root)
            self._handle.write(line + "\n")
            self._handle.flush()
            return True
        except (OSError, ValueError) as exc:  # ValueError: a handle closed under us
            self._problem = f"{type(exc).__name__}: {exc}"
            if not self._told:
                self._told = True
                log.error("rlprof: cannot write the manifest %s (%s); training goes on, records are counted as lost "
                          "and the failure is recorded once writing works again", self.path, self._problem)
            self._drop_handle()
            return False

    def _drop_handle(self) -> None:
        from rlprof.layout import close_quietly

        handle, self._handle = self._handle, None
        close_quietly(handle)

    def close(self) -> None:
        with self._lock:
            self._drop_handle()


def _open_append(path: Path, root: Path):
    """Open ``path`` for appending, creating its directory under ``root``; no symbolic link is followed
    (:func:`rlprof.layout.open_file`)."""
    from rlprof.layout import open_file

    return open_file(path, root, "a")


def record_relocation(pending: dict[str, Any], target: Path, source: Path) -> bool:
    """Append, to the manifest that listed the ``pending`` artifact (a record from :func:`read_records`),
    the artifact record of the file now moved to ``target`` from ``source`` (nsys reports relocated
    after the process ended). Keeps what the pending record said the file belongs to."""
    run_dir = Path(pending["_run_dir"])
    common = {k: pending.get(k) for k in ("run", "rank", "host", "pid")}
    kept = {k: v for k, v in pending.items()
            if k not in common and k not in ("type", "time", "_manifest", "_run_dir", "path", "size", "kind", "reason",
                                             "source", "relocate_to", "outside_output_dir")}
    writer = ManifestWriter(Path(pending["_manifest"]), common, root=run_dir)
    try:
        return writer.write("artifact", **kept, path=relative(target, run_dir), size=path_size(target), kind="file",
                            relocated_from=str(source), outside_output_dir=False)
    finally:
        writer.close()
