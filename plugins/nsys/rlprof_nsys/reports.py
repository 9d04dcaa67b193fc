"""Where nsys writes a Ray worker's reports, and which of them belong to this process.

Ray's nsight plugin starts each profiled worker as ``nsys profile ... -o <dir>/<o> python ...``, with
``<dir>`` Ray's fixed ``<session>/logs/nsight`` (``/tmp/ray/session_latest/logs/nsight`` on each
node) and ``<o>`` the ``o`` option, default ``worker_process_%p``; an absolute ``o`` is kept as it
is. nsys replaces ``%p`` by the worker's pid, ``%h`` by the host name, ``%q{VAR}`` by ``$VAR`` and
``%%`` by ``%``. With a repeating ``capture-range-end`` the k-th capture window becomes
``<base>.<k>.nsys-rep``; a single-range capture writes ``<base>.nsys-rep``.

When the worker itself runs under ``nsys profile``, the ``-o`` of that command line (its parent's)
is used instead of guessing: it is exactly where nsys writes, whatever Ray's session directory
(several Ray clusters on one machine each have their own; ``session_latest`` is only the newest).

When nsys writes (measured with Nsight Systems 2022.4.2, ``capture-range-end=repeat-shutdown:N``):
the call that closes each window blocks the application for a moment while nsys takes the window's
data; the call that closes the N-th window returns only after nsys has written all N reports. So at
rlprof's finalize every report of a counted plan is complete. With ``repeat`` (uncounted) they are
written when the process exits, after finalize. A report counts as complete when it exists, is not
empty, and no process has it open (:func:`is_complete`; a ``<base>.<k>.qdstrm`` stream beside it,
which later nsys versions keep there while importing, also means "not yet").
"""

from __future__ import annotations

import functools
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

RAY_NSIGHT_DIR = "/tmp/ray/session_latest/logs/nsight"
DIR_ENV = "RLPROF_RAY_NSIGHT_DIR"
"""Overrides Ray's nsight directory (after ``tool_config.nsys.ray_nsight_dir``), e.g. for ``ray start --temp-dir``."""
DEFAULT_OUTPUT = "worker_process_%p"
SUFFIX = ".nsys-rep"
SETTLE_SECONDS = 3.0
"""A report modified more recently than this may still be being written."""

_PERCENT = re.compile(r"%(q\{([^}]*)\}|[ph%])")


def ray_nsight_dir(tool_config: Mapping[str, Any]) -> Path:
    """Ray's nsight directory on this node: ``tool_config['ray_nsight_dir']``, else ``$RLPROF_RAY_NSIGHT_DIR``,
    else ``/tmp/ray/session_latest/logs/nsight``."""
    return Path(tool_config.get("ray_nsight_dir") or os.environ.get(DIR_ENV) or RAY_NSIGHT_DIR)


def expand_output(template: str, pid: int, host: str | None = None) -> str:
    """nsys' substitutions in an ``-o`` value, for one process (``worker_process_%p`` → ``worker_process_4242``)."""

    def substitute(match: re.Match) -> str:
        code = match.group(1)
        if code == "p":
            return str(pid)
        if code == "h":
            return host or socket.gethostname()
        if code == "%":
            return "%"
        return os.environ.get(match.group(2), "")

    return _PERCENT.sub(substitute, template.strip().strip("'\""))


@dataclass(frozen=True)
class ReportFiles:
    """The reports one process gets from nsys: ``<directory>/<base>[.<k>].nsys-rep``."""

    directory: Path
    base: str

    def path(self, index: int | None) -> Path:
        """The report of window ``index`` (None: the unnumbered single-range report)."""
        return self.directory / (self.base + ("" if index is None else f".{index}") + SUFFIX)

    def index_of(self, name: str) -> int | None | bool:
        """The window number in a report file name; None for the unnumbered report; False when the
        file is not this process's (``worker_process_42.1`` is not ``worker_process_4.1``)."""
        if not name.startswith(self.base) or not name.endswith(SUFFIX):
            return False
        middle = name[len(self.base):-len(SUFFIX)]
        if middle == "":
            return None
        if middle.startswith(".") and middle[1:].isdigit():
            return int(middle[1:])
        return False

    def existing(self) -> dict[int | None, Path]:
        """This process's reports present now, by window number."""
        found: dict[int | None, Path] = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return found
        for entry in entries:
            index = self.index_of(entry.name)
            if index is not False and entry.is_file():
                found[index] = Path(entry.path)
        return found


def reports_of(pid: int, tool_config: Mapping[str, Any], host: str | None = None) -> ReportFiles:
    """Where nsys puts the reports of process ``pid`` launched with this tool_config's worker options
    (for this very process under nsys: the ``-o`` of the ``nsys profile`` that started it)."""
    worker = tool_config.get("worker_nsight_options") or {}
    given = nsys_output_option() if pid == os.getpid() else None
    output = Path(expand_output(given or worker.get("o") or DEFAULT_OUTPUT, pid, host))
    if not output.is_absolute():
        output = ray_nsight_dir(tool_config) / output
    name = output.name[: -len(SUFFIX)] if output.name.endswith(SUFFIX) else output.name
    return ReportFiles(output.parent, name)


def is_complete(path: Path, settle_seconds: float = SETTLE_SECONDS) -> bool:
    """True when nsys has finished writing ``path``: it exists, is not empty, has no ``.qdstrm``
    stream beside it, and no process has it open (where ``/proc`` cannot tell: it was last modified
    at least ``settle_seconds`` ago)."""
    try:
        stat = path.stat()
    except OSError:
        return False
    stream = path.with_name(path.name[: -len(SUFFIX)] + ".qdstrm") if path.name.endswith(SUFFIX) else None
    if stat.st_size == 0 or (stream is not None and stream.exists()):
        return False
    held = files_held_open()
    if held is None:
        return time.time() - stat.st_mtime >= settle_seconds
    return os.path.realpath(path) not in held


def files_held_open() -> set[str] | None:
    """Every path some process of this machine has open (read from ``/proc/*/fd``), or None when
    ``/proc`` is not there. A few milliseconds; used only at finalize and by ``relocate``."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    held: set[str] = set()
    for pid in pids:
        directory = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(directory)
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                held.add(os.readlink(f"{directory}/{fd}"))
            except OSError:
                continue
    return held


@functools.lru_cache(maxsize=1)
def nsys_ancestor() -> tuple[bytes, ...] | None:
    """The command line of the ``nsys profile`` that started this process (its nearest such ancestor),
    or None. Read once and remembered: with ``repeat-shutdown:N`` that nsys exits after the N-th
    window while the worker goes on (``kill=none``), so at finalize it is no longer there to ask.
    The backend reads it when its first window opens."""
    for words in _ancestor_commands():
        names = [os.path.basename(w) for w in words[:3]]
        if b"nsys" in names and b"profile" in words[:4]:
            return tuple(words)
    return None


def nsys_output_option() -> str | None:
    """The ``-o``/``--output`` of the ``nsys profile`` command that started this process, or None
    when it was not started by one or gave no output."""
    return nsys_option("o", "output")


def nsys_option(short: str | None, long: str) -> str | None:
    """The value of one option (``-<short> v``, ``-<short>v``, ``--<long>=v``, ``--<long> v``) of the
    ``nsys profile`` command that started this process; None when not under nsys or not given.
    Words from the profiled program on (its first word naming ``python``) are not nsys' options."""
    words = nsys_ancestor()
    if words is None:
        return None
    for index, word in enumerate(words):
        text = word.decode(errors="replace")
        if os.path.basename(text).startswith("python"):
            return None
        following = words[index + 1].decode(errors="replace") if index + 1 < len(words) else None
        if text == f"--{long}" or (short and text == f"-{short}"):
            return following
        if text.startswith(f"--{long}="):
            return text.split("=", 1)[1]
        if short and text.startswith(f"-{short}") and len(text) > 2 and not text.startswith("--"):
            return text[2:]
    return None


def _ancestor_commands(depth: int = 4):
    """The command lines (argv as bytes) of this process's parent, grandparent... up to ``depth``."""
    pid = os.getppid()
    for _ in range(depth):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            return
        yield words
        pid = int(parent)
        if pid <= 1:
            return


UNDER_NSYS_ENV = "RLPROF_NSYS_WORKER"
"""Set to 1 in the runtime_env of every worker rlprof starts under nsys (see rlprof_nsys.launch)."""


def running_under_nsys() -> bool:
    """Whether this process is being profiled by ``nsys profile`` (so reports will come).

    A worker rlprof started under nsys says so in ``$RLPROF_NSYS_WORKER``. Otherwise nsys' own
    traces count: its injection library in ``NVTX_INJECTION64_PATH`` or ``LD_PRELOAD``, or an
    ancestor process running ``nsys profile`` (e.g. a driver started by hand under nsys).
    """
    if os.environ.get(UNDER_NSYS_ENV) == "1":
        return True
    for variable in ("NVTX_INJECTION64_PATH", "LD_PRELOAD"):
        if "ToolsInjection" in os.environ.get(variable, ""):
            return True
    return nsys_ancestor() is not None
