"""The process-wide cache of directories the safe walk opened, kept open between walks, and its fork handler.

Every capture's walk (:mod:`rlprof.layout.safe_io`) starts at the run directory and ends at a capture's
directory; keeping those two open saves the walk its system calls on the training thread. A process's
profiling session closes them when it ends (:func:`release_held_dirs`); a forked child starts with none.
"""

from __future__ import annotations

import os
import stat
import threading


class _HeldDirs:
    """Directories :func:`_open_dir_chain` walked to, kept open so that the next walk costs less: the
    last run directory (every capture's chain starts there) and the last other directory walked to (a
    capture's directory: made when the capture opens, written into when it closes).

    A descriptor handed out from here leads where a walk would: it was reached by a walk (no link
    followed), and it is only reused while ``stat(path)`` still names the same directory (not removed,
    not renamed, not replaced). Under a lock: Ray and engine threads write too. A forked child starts
    empty (:func:`_after_fork_in_child`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[bool, tuple[str, str, int, int, int]] = {}
        """Is it a run directory -> ``(path, run directory, fd, st_dev, st_ino)``."""

    def reuse(self, path: str, root: str) -> int | None:
        """A new descriptor of ``path`` when it is held and still that directory, else None."""
        with self._lock:
            held = self._slots.get(path == root)
            if held is None or held[:2] != (path, root):
                return None
            try:
                seen = os.stat(path)
            except OSError:
                return None
            if (seen.st_dev, seen.st_ino) != held[3:] or not stat.S_ISDIR(seen.st_mode):
                return None
            return os.dup(held[2])

    def hold(self, path: str, root: str, fd: int) -> None:
        """Keep a duplicate of ``fd`` (the directory ``path`` a walk just opened) in its slot, dropping
        the one held there before."""
        info = os.fstat(fd)
        kept = os.dup(fd)
        with self._lock:
            dropped = self._slots.get(path == root)
            self._slots[path == root] = (path, root, kept, info.st_dev, info.st_ino)
        if dropped is not None:
            os.close(dropped[2])

    def close(self) -> None:
        """Close every held descriptor (the next walk starts from scratch)."""
        with self._lock:
            held, self._slots = self._slots, {}
        for entry in held.values():
            os.close(entry[2])


_HELD = _HeldDirs()


def release_held_dirs() -> None:
    """Close the directories kept open between walks: called when a process's profiling session ends,
    so that no descriptor of rlprof stays open after finalize."""
    _HELD.close()


def _after_fork_in_child() -> None:
    """A forked child starts with a fresh lock (a thread of the parent may have held it at the fork) and
    no held descriptors of its own (the inherited numbers are left alone: they may be reused there)."""
    _HELD._lock, _HELD._slots = threading.Lock(), {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
