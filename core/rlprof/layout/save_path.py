"""Whether a ``save_path`` can be used, said in plain words before anything is written (:func:`check_save_path`)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def check_save_path(save_path: object) -> str | None:
    """Why ``save_path`` cannot be used, in plain words, or None when it can.

    Cheap and read-only: checks the text (empty, NUL byte, a component longer than the file
    system's NAME_MAX, the whole path longer than PATH_MAX), then the nearest existing ancestor
    (a file in the way, a symbolic link loop, not writable by this user, a read-only file system).
    Writability is what ``access(2)`` says for this process: for root, a directory with mode 0o500 on
    a writable file system *is* writable, and the answer says so.
    """
    text = os.fspath(save_path) if isinstance(save_path, (str, os.PathLike)) else save_path
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not isinstance(text, str):
        return f"it is a {type(save_path).__name__}, not a path"
    if not text.strip():
        return "it is empty"
    if "\0" in text:
        return "it contains a NUL byte, which no file system allows in a path"
    try:
        path = Path(os.path.abspath(text))
    except OSError as exc:  # a relative path while the working directory was removed
        return f"it is relative and the working directory cannot be found: {exc.strerror}"
    name_max, path_max = _limits(path)
    for part in path.parts:
        if len(os.fsencode(part)) > name_max:
            return f"the component {part[:40]!r}... is {len(os.fsencode(part))} bytes long; this file system allows {name_max}"
    if len(os.fsencode(str(path))) >= path_max:
        return f"it is {len(os.fsencode(str(path)))} bytes long; paths must be shorter than {path_max}"
    existing = path
    while True:
        try:
            info = os.stat(existing)
            break
        except (FileNotFoundError, PermissionError):  # missing, or behind a directory we cannot search
            existing = existing.parent
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{existing} is a symbolic link loop"
            if exc.errno == errno.ENOTDIR:
                return f"{_first_non_directory(existing)} is a file, not a directory"
            if exc.errno == errno.ENAMETOOLONG:
                return f"{existing} is too long for this file system"
            return f"{existing} cannot be examined: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        if existing == path:
            return f"{path} is a file, not a directory"
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        if _read_only(existing):
            return f"{existing} is on a read-only file system"
        who = "this user" if os.geteuid() != 0 else "root"
        return f"{existing} is not writable by {who} (mode {stat.filemode(info.st_mode)})"
    return None


def _limits(path: Path) -> tuple[int, int]:
    probe = path
    while True:
        try:
            return os.pathconf(probe, "PC_NAME_MAX"), os.pathconf(probe, "PC_PATH_MAX")
        except (OSError, ValueError):
            if probe == probe.parent:
                return 255, 4096
            probe = probe.parent


def _first_non_directory(path: Path) -> Path:
    for parent in reversed(path.parents):
        try:
            if not stat.S_ISDIR(os.stat(parent).st_mode):
                return parent
        except OSError:
            break
    return path


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
