"""Where things go under ``save_path``. One layout for every backend; nothing is ever overwritten.

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

import os
import re
import secrets
import socket
import time
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_name(text: str) -> str:
    """A single path component made only of ``[A-Za-z0-9_.-]``; never ``.``/``..`` or empty."""
    cleaned = _UNSAFE.sub("_", str(text)).strip(".")
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


def capture_directory(run_dir: Path, capture_id: str, rank: int, host: str, pid: int) -> Path:
    return run_dir / capture_id / process_tag(rank, host, pid)


def relative(path: Path, run_dir: Path) -> str:
    try:
        return os.path.relpath(path, run_dir)
    except ValueError:
        return str(path)
