"""Reading manifests: every process's file under the paths given, merged, an artifact's two records settled into one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator


WRITING, WRITTEN = "writing", "written"
"""The ``state`` of an artifact record: listed when its file began to be written in the background,
and again once it is complete (or ``"failed"``)."""


def settled_artifacts(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Artifact records as readers use them: the ``writing`` record of a file and the record that settles
    it (``written`` or ``failed``, same file, same process) become one, where the first of the two was:
    the ``writing`` record's fields with the other's ``state``, ``size``, ``sha256``, ``error`` and
    ``time``. (The settling record usually comes later, but not always: a backend released after a
    failing hook is finalized before the failing call's records are written.) Any other record is
    kept as it is, in order (a file listed twice without a state is still listed twice), records of
    other types too (:func:`read_records` settles each manifest's records this way)."""
    settled: list[dict[str, Any]] = []
    unpaired: dict[tuple[Any, ...], tuple[int, bool]] = {}
    """file -> (index in ``settled``, is it the writing record) of a record still waiting for its pair."""
    for record in records:
        state = record.get("state")
        if state is None or record.get("type", "artifact") != "artifact":
            settled.append(dict(record))
            continue
        key = (record.get("_manifest"), record.get("rank"), record.get("pid"), record.get("path"))
        writing = state == WRITING
        waiting = unpaired.get(key)
        if waiting is None or waiting[1] == writing:
            unpaired[key] = (len(settled), writing)
            settled.append(dict(record))
            continue
        del unpaired[key]
        index = waiting[0]
        first, final = (settled[index], record) if not writing else (dict(record), settled[index])
        first.update({k: final[k] for k in ("state", "size", "sha256", "error", "time") if k in final})
        settled[index] = first
    return settled


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
    """All records of all manifests under ``paths``; each gets ``_manifest`` and ``_run_dir``. The two
    artifact records of a file written in the background come as one (:func:`settled_artifacts`): a
    ``writing`` record read alone is a file that was never finished."""
    for file in manifest_files(paths):
        run_dir = file.parent.parent
        records, background = [], False
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
                records.append(record)
                background = background or "state" in record
        yield from settled_artifacts(records) if background else records


def artifacts(paths: Iterable[os.PathLike | str]) -> list[dict[str, Any]]:
    """The artifact records under ``paths`` (settled, as :func:`read_records` gives them)."""
    return [r for r in read_records(paths) if r.get("type") == "artifact"]
