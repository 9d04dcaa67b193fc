"""What a profiled run leaves behind outside its run directory: the evidence for "writes only
under the directory it is given" and "leaves nothing open".

A :class:`Footprint` is entered before the :class:`~rlprof.Profiler` is created and settled after
``finalize``. It reports, in paths a person can check:

* files opened for writing, directories made and files renamed into place **anywhere** outside
  the allowed roots, seen through a Python audit hook (:pep:`578`), so a backend writing to a
  hard-coded ``/tmp/trace.json`` or ``~/profiles`` is caught even though nobody scans those places.
  Writes from C code (a native profiler library) are invisible to audit hooks; the directory
  scans below catch those that land in the watched directories;
* files that appeared in the watched directories (the run's working directory, the temporary
  directory, ``save_path`` outside this run's directory);
* file descriptors opened during the run that still point into the run directory or a watched
  directory after finalize (a trace file never closed);
* non-daemon threads and child processes started during the run and still alive after finalize.

Python's audit hooks cannot be removed once added, so one hook is installed on first use and does
nothing while no footprint is being taken.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Iterable

from rlprof import layout

_ALWAYS_ALLOWED = ("/dev/", "/proc/", "/sys/")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_active: list["Footprint"] = []
_hook_installed = False
_in_hook = threading.local()


def _audit(event: str, args: tuple) -> None:
    if not _active or getattr(_in_hook, "busy", False):
        return
    dir_fd = None
    if event == "open":
        path, mode, flags = args
        if not _opens_for_writing(mode, flags):
            return
        action = "opened for writing"
    elif event == "os.mkdir":
        path, action, dir_fd = args[0], "created the directory", args[2]
    elif event in ("os.rename", "os.replace"):
        path, action = args[1], "moved a file to"
    else:
        return
    if isinstance(path, int) or path is None:
        return  # an already-open descriptor: its opening was seen (or predates the run)
    _in_hook.busy = True
    try:
        absolute = _absolute(os.fsdecode(path), dir_fd)
        for footprint in _active:
            footprint._note_write(action, absolute, directory=action == "created the directory")
    except Exception:  # an audit hook must never break the code it watches
        pass
    finally:
        _in_hook.busy = False


def _absolute(path: str, dir_fd: int | None) -> str:
    """Where a write really goes. A relative name opened against a directory descriptor (how
    :func:`rlprof.layout.open_file` and ``ensure_dir`` walk down without following links) is resolved
    through that descriptor; ``os.open`` does not pass its ``dir_fd`` to the audit event, so for it
    the path is the one :mod:`rlprof.layout` announces in ``layout.AUDIT`` while it makes the call."""
    if os.path.isabs(path):
        return os.path.abspath(path)
    if isinstance(dir_fd, int) and dir_fd >= 0:
        try:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        except OSError:
            pass
    announced = getattr(layout.AUDIT, "path", None)
    if announced is not None and announced.endswith(path):
        return os.path.abspath(announced)
    return os.path.abspath(path)


def _opens_for_writing(mode, flags) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _install_hook() -> None:
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True


def _inside(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _files_under(directory: Path, skip: Path | None = None) -> set[str]:
    found: set[str] = set()
    if not directory.exists():
        return found
    for root, dirs, files in os.walk(directory):
        if skip is not None:
            dirs[:] = [d for d in dirs if Path(root, d) != skip]
        found.update(os.path.join(root, f) for f in files)  # empty directories (library caches) are no harm
    return found


def _open_descriptors() -> dict[int, str]:
    found = {}
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # not Linux: no descriptor check
        return found
    for name in names:
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return found


CHILDREN_GRACE_S = 30.0
"""How long child processes started during the run get to end after finalize. A backend's process left running
(a tool it never stopped) outlives any wait; a short-lived one started meanwhile by someone else in the same
process (a CI run's pytest worker, its earlier tests' background work) may need seconds to end on a loaded machine:
a CI run of 2026-11-28 counted 2 to 7 such ``python`` processes against a backend that starts none, after 1 s."""


def _command_line(pid: int) -> str:
    """The first 160 characters of a process's command line (what it is, in a failure's message)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()[:160] or "?"
    except OSError:
        return "ended"


def _cores_analysis(pid: str) -> bool:
    """The child is the core's own trace analysis (:func:`rlprof.priority.command`: a step's split), which by design
    goes on after finalize while its process lives (:meth:`~rlprof.runtime.split_analyser.SplitAnalyser.hand_off`):
    not the backend's to stop. On a loaded machine it is still running when finalize returns."""
    from rlprof.runtime.split_analyser import MODULE

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return MODULE.encode() in handle.read()
    except OSError:
        return False


def _children() -> dict[int, str]:
    """Live child processes of this process: {pid: command}, from /proc (empty elsewhere)."""
    me = os.getpid()
    found = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            after = stat.rsplit(")", 1)[1].split()
            if int(after[1]) == me and after[0] != "Z" and not _cores_analysis(entry):
                found[int(entry)] = stat.split("(", 1)[1].rsplit(")", 1)[0]
        except (OSError, IndexError, ValueError):
            continue
    return found


class Footprint:
    """Watch one run. ``allowed``: roots the backend may write in (the run directory, and the
    temporary directory for files it removes again); ``watched``: {description: directory} scanned
    for files that appeared (the run directory itself is skipped inside them)."""

    def __init__(self, *, run_dir: Path, allowed: Iterable[Path], watched: dict[str, Path]):
        self.run_dir = Path(run_dir).absolute()
        self.allowed = tuple(os.path.abspath(p) for p in (self.run_dir, *allowed)) + _ALWAYS_ALLOWED
        self.allowed += tuple(os.path.realpath(p) for p in self.allowed)
        self.watched = {label: Path(d).absolute() for label, d in watched.items()}
        self.writes_outside: list[str] = []
        """``"opened for writing /tmp/x.json"``: writes seen anywhere outside the allowed roots."""
        self.appeared: list[str] = []
        """``"/work/cwd/trace.json (in the working directory)"``: files left in watched directories."""
        self.open_files: list[str] = []
        self.live_threads: list[str] = []
        self.live_children: list[str] = []
        self._before_files: dict[str, set[str]] = {}
        self._before_fds: dict[int, str] = {}
        self._before_threads: set[threading.Thread] = set()
        self._before_children: set[int] = set()

    def __enter__(self) -> "Footprint":
        self._before_files = {label: _files_under(d, self.run_dir) for label, d in self.watched.items()}
        self._before_fds = _open_descriptors()
        self._before_threads = set(threading.enumerate())
        self._before_children = set(_children())
        _install_hook()
        _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        if self in _active:
            _active.remove(self)
        for label, directory in self.watched.items():
            new = _files_under(directory, self.run_dir) - self._before_files[label]
            self.appeared.extend(f"{path} (in {label})" for path in sorted(new))

    def settle(self, grace_s: float = 1.0, children_grace_s: float = CHILDREN_GRACE_S) -> None:
        """Call after finalize: record what is still open or running (threads get ``grace_s`` to finish, child
        processes ``children_grace_s``)."""
        deadline = time.monotonic() + grace_s
        threads = [t for t in threading.enumerate() if t not in self._before_threads and not t.daemon]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.live_threads = [f"thread {t.name!r}" for t in threads if t.is_alive()]
        children = {}
        deadline = time.monotonic() + children_grace_s
        while True:
            children = {pid: cmd for pid, cmd in _children().items() if pid not in self._before_children}
            if not children or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        self.live_children = [f"process {pid} ({cmd}: {_command_line(pid)})" for pid, cmd in sorted(children.items())]
        roots = [str(self.run_dir), *(str(d) for d in self.watched.values())]
        self.open_files = sorted(
            target for fd, target in _open_descriptors().items()
            if self._before_fds.get(fd) != target and target.startswith("/") and _inside(target, roots)
        )

    def _note_write(self, action: str, path: str, directory: bool = False) -> None:
        if _inside(path, self.allowed) or "__pycache__" in path:
            return  # __pycache__: Python itself writing bytecode for a module imported late
        if directory and _inside(str(self.run_dir), (path,)):
            return  # the core creating save_path, the run directory's parent
        entry = f"{action} {path}"
        if entry not in self.writes_outside:
            self.writes_outside.append(entry)
