"""Where things go under ``save_path``: the names of runs, captures, processes and the rows of a trace.

::

    <save_path>/<run_id>/                              one directory per run (run ids never repeat)
        <capture_id>/rank<R>-<host>-<pid>/<backend>/   a capture's files, e.g. step3/rank0-node1-4242/torch/
        _process/rank<R>-<host>-<pid>/<backend>/       files not tied to a capture (finalize)
        manifest/rank<R>-<host>-<pid>.jsonl            what this process wrote (see rlprof.manifest)

``capture_id`` is ``step<N>`` (end-to-end), ``step<A>-<B>`` (merged continuous steps) or
``step<N>.<region>`` (discrete), with ``.<k>`` appended when a region repeats within a step or a
sampled region has several windows. Every name from user input passes :func:`safe_name`.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
import time
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_NAME = 120
"""Longest name :func:`safe_name` returns: a component plus rlprof's own suffixes (``.3``,
``.pt.trace.json.gz``) stays far below the file systems' 255-byte NAME_MAX."""
_KEEP = 100


def safe_name(text: str) -> str:
    """A single path component made only of ``[A-Za-z0-9_.-]``; never ``.``/``..`` or empty.

    Names longer than :data:`MAX_NAME` characters are shortened, never dropped: the first 100
    characters, ``-`` and 8 hex digits of the SHA-1 of ``text`` (so two long names that share a
    prefix stay distinct, and the same name always maps to the same component).
    """
    text = str(text)
    cleaned = _UNSAFE.sub("_", text).strip(".")
    if len(cleaned) > MAX_NAME:
        digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        cleaned = cleaned[:_KEEP].rstrip(".") + "-" + digest
    return cleaned or "_"


def new_run_id() -> str:
    """``20261122-050101-1a2b3c``: sortable by start time, unique across nodes."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def hostname() -> str:
    return safe_name(socket.gethostname().split(".")[0])


def process_tag(rank: int, host: str, pid: int) -> str:
    return f"rank{rank}-{host}-{pid}"


def steps_label(steps: tuple[int, ...]) -> str:
    return f"step{steps[0]}" if len(steps) == 1 else f"step{steps[0]}-{steps[-1]}"


MANIFEST_DIR, BUDGET_DIR, BREAKDOWN_DIR, REQUESTS_DIR = "manifest", "budget", "breakdown", "requests"
PEAK_DIR, LATE_DIR = "peak", "late_splits"
CORE_DIRS = (MANIFEST_DIR, BUDGET_DIR, BREAKDOWN_DIR, REQUESTS_DIR, PEAK_DIR, LATE_DIR)
"""The folders of a run directory the core writes itself, beside the captures: every process's manifest,
each node's count of bytes written (:mod:`rlprof.runtime.budget`), on a Ray controller the breakdown
rows its nodes shipped (:func:`shipped_rows_path`), an armed run's capture requests and answers
(:mod:`rlprof.runtime.unplanned`), each host's measured peak FLOP/s (:func:`rlprof.peak.run_peak`), and the
splits a process handed on as it ended, until written (:mod:`rlprof.analysis.late_split`). No backend writes there."""


ROWS_SUFFIX = ".rlprof-breakdown.json"
"""A trace's breakdown rows (the analysis's cache: :func:`rows_path`; for a trace on another node, under the
controller's :data:`BREAKDOWN_DIR`: :func:`shipped_rows_path`)."""
CACHE_ENV = "RLPROF_CACHE_DIR"
"""Where the analysis keeps what it derives from traces that belong to no run (default
``$XDG_CACHE_HOME/rlprof/breakdown``, that is ``~/.cache/rlprof/breakdown``); set empty, nothing is kept."""


def rows_path(trace: str, suffix: str = ROWS_SUFFIX) -> Path | None:
    """Where the analysis keeps what it derives from ``trace``: its breakdown rows, or with ``suffix`` another
    file made from it (rlprof-nsys: a report's SQLite export). Never beside the trace: the folders that hold
    traces keep only what the backends wrote, for the tools users hand them to.

    * A trace of a run (under ``<run>/<capture>/rank<R>-<host>-<pid>/``, the run holding its ``manifest/``):
      ``<run>/breakdown/<digest>-<name><suffix>``, the digest of the trace's path inside the run (so a run
      directory moved whole keeps its caches).
    * Any other trace: ``$RLPROF_CACHE_DIR/<digest>-<name><suffix>`` (:data:`CACHE_ENV`), the digest of its
      absolute path; None when ``RLPROF_CACHE_DIR`` is set empty (nothing kept).

    ``<name>`` is the trace's own name (:func:`safe_name`, shortened), so a person can tell the files apart.
    """
    path = Path(os.path.abspath(trace))
    placed = process_of(path)
    run_dir = placed[1].parent if placed else None
    if run_dir is not None and (run_dir / MANIFEST_DIR).is_dir():
        folder, key = run_dir / BREAKDOWN_DIR, os.path.relpath(path.resolve(), run_dir.resolve())
    else:
        folder, key = _cache_dir(), str(path)
        if folder is None:
            return None
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return folder / f"{digest}-{safe_name(path.name)[:64]}{suffix}"


def _cache_dir() -> Path | None:
    chosen = os.environ.get(CACHE_ENV)
    if chosen is not None:
        return Path(chosen).expanduser() if chosen.strip() else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlprof" / BREAKDOWN_DIR


def shipped_rows_path(run_dir: Path, node: str | None, trace: str) -> Path:
    """Where the controller's run directory keeps the rows of ``trace`` (its absolute path on Ray node
    ``node``), shipped from that node. Named by a digest of both, so no name in a manifest can lead
    the file outside ``run_dir``, and two nodes' equal paths stay apart."""
    digest = hashlib.sha256(f"{node or ''}\0{trace}".encode()).hexdigest()[:24]
    return run_dir / BREAKDOWN_DIR / f"{digest}{ROWS_SUFFIX}"


def capture_directory(run_dir: Path, capture_id: str, rank: int, host: str, pid: int) -> Path:
    return run_dir / f"{capture_id}{os.sep}{process_tag(rank, host, pid)}"  # one Path operation, not two


_PROCESS_TAG = re.compile(r"rank(\d+)-(.+)-\d+$")


def process_of(path: Path) -> tuple[int, Path] | None:
    """The rank and the capture directory of a file under a process's directory of this layout
    (``<capture>/rank<R>-<host>-<pid>/...``, :func:`process_tag`), or None for a file elsewhere.
    Trace readers ask it for files that name no rank themselves (nsys reports, torch_npu output)."""
    for directory in Path(path).resolve().parents:
        matched = _PROCESS_TAG.match(directory.name)
        if matched:
            return int(matched.group(1)), directory.parent
    return None


def host_of(path: os.PathLike | str) -> str | None:
    """The host a file under a process's directory of this layout was written on (:func:`process_tag`),
    or None for a file elsewhere. The analysis asks it to know which traces share one clock."""
    for directory in Path(path).resolve().parents:
        matched = _PROCESS_TAG.match(directory.name)
        if matched:
            return matched.group(2)
    return None


def relative(path: os.PathLike | str, run_dir: os.PathLike | str) -> str:
    try:
        return os.path.relpath(path, run_dir)
    except ValueError:
        return str(path)
