"""Writing under a run without following links: every directory and file the core creates goes through here.

Writing safely (``save_path`` is often shared on a cluster, so anyone who can write there could plant
a symbolic link where rlprof is about to write): every directory and file the core creates under a run
goes through :func:`ensure_dir` / :func:`open_file`, which walk the path one component at a time with
directory file descriptors and ``O_NOFOLLOW``, so a link planted as the run directory, an intermediate
directory, a trace or a manifest name is refused (:class:`UnsafePathError`) instead of followed, and a
file that exists is never replaced. :func:`check_save_path` says in plain words why a ``save_path``
cannot be used, before anything is written.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from rlprof.layout.held_dirs import _HELD


class UnsafePathError(OSError):
    """A path under a run directory is, or passes through, a symbolic link (or is not a regular
    file/directory where one is needed). rlprof refuses to write there rather than follow it."""


AUDIT = threading.local()
"""While this module creates a directory or opens a file relative to a directory descriptor,
``AUDIT.path`` is the absolute path it acts on (else None): audit hooks see only the relative name
(``open`` events carry no ``dir_fd``), so :mod:`rlprof.testing.footprint` reads it from here."""


def _audited(path: Path, call, *args, **kwargs):
    AUDIT.path = str(path)
    try:
        return call(*args, **kwargs)
    finally:
        AUDIT.path = None


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX; absent on Windows, where rlprof does not run training
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
_FILE_FLAGS = {
    "w": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "wb": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
}


def ensure_dir(path: Path, root: Path) -> Path:
    """``mkdir -p path`` without following a symbolic link at or under ``root``.

    ``root`` is the first directory rlprof owns (the run directory): its ancestors are the user's
    choice and are followed as usual (a ``save_path`` that is itself a link to a scratch disk works),
    ``root`` and every component below it are created or opened one at a time relative to their
    parent's file descriptor with ``O_NOFOLLOW``, so a link planted anywhere in that chain — even
    between the check and the use — is refused. Raises :class:`UnsafePathError` (naming the path)
    for a link, a non-directory in the chain, or a ``path`` outside ``root``; other OS errors
    (permissions, disk full) as they come.
    """
    fd = _open_dir_chain(path, root)
    os.close(fd)
    return path if isinstance(path, Path) else Path(path)


def open_file(path: Path, root: Path, mode: str = "w") -> IO:
    """Open ``path`` (under ``root``) for writing without following links; creates its directories
    with :func:`ensure_dir`'s guarantees.

    ``"w"``/``"wb"`` create a new file and refuse an existing one (``FileExistsError``: rlprof never
    overwrites what is there); ``"a"``/``"ab"`` append, creating the file if needed. In every mode a
    symbolic link, a FIFO, a device or (when appending) a file with other hard links at ``path`` is
    refused with :class:`UnsafePathError`. Text modes write UTF-8.
    """
    try:
        flags = _FILE_FLAGS[mode]
    except KeyError:
        raise ValueError(f"open_file: mode {mode!r} is not one of {', '.join(_FILE_FLAGS)}") from None
    parent, name = os.path.split(os.path.normpath(path))  # strings, not Path: this runs for every file a capture writes
    dir_fd = _open_dir_chain(parent, root)
    try:
        return _open_in(dir_fd, name, path, mode, flags)
    finally:
        os.close(dir_fd)


def close_quietly(handle: IO | None) -> None:
    """Close a handle of a file rlprof appends to while training runs, after a write failed or at the end: a second
    error from the close itself (the disk still full, the handle closed under us) says nothing new, so it is dropped;
    the caller has already told the first."""
    if handle is not None:
        try:
            handle.close()
        except (OSError, ValueError):
            pass


def _open_in(dir_fd: int, name: str, path: os.PathLike | str, mode: str, flags: int) -> IO:
    """:func:`open_file`'s open of ``name`` in the directory ``dir_fd`` (``path``: the same file, for
    messages and the audit)."""
    try:
        # O_NONBLOCK: a FIFO planted at this name must not block the training process in open().
        fd = _audited(path, os.open, name, flags | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC, 0o666,
                      dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (exc.errno == errno.EEXIST and _is_link(name, dir_fd)):
            raise UnsafePathError(exc.errno, "refusing to write through a symbolic link", str(path)) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise UnsafePathError(exc.errno, "refusing to write into a FIFO", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePathError(errno.EINVAL, "refusing to write into something that is not a regular file", str(path))
        if "a" in mode and info.st_nlink > 1:
            raise UnsafePathError(errno.EMLINK, "refusing to append to a file with other hard links", str(path))
        os.set_blocking(fd, True)
        if "b" in mode:
            return os.fdopen(fd, mode)
        return os.fdopen(fd, mode, encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def tool_output(target: Path, root: Path) -> Iterator[Path]:
    """For a tool that writes a file *by path* (``torch.cuda.memory._dump_snapshot(path)``,
    ``export_chrome_trace(path)``) and would follow a link or replace a file there::

        with tool_output(directory / "snapshot.pickle", run_dir) as scratch:
            torch.cuda.memory._dump_snapshot(str(scratch))

    ``scratch`` lies in a fresh private directory (``mkdtemp``: mode 0o700, a random name) beside
    ``target`` (whose directory is made with :func:`ensure_dir`), so no one else can plant anything
    there; when the block ends without an exception the file is put at ``target`` by :func:`place`
    (never through a link, never over an existing file). The private directory is removed either way.
    """
    import shutil
    import tempfile

    target = Path(target)
    ensure_dir(target.parent, root)
    private = Path(tempfile.mkdtemp(prefix=".rlprof-", dir=target.parent))
    try:
        scratch = private / target.name
        yield scratch
        place(scratch, target, root)
    finally:
        shutil.rmtree(private, ignore_errors=True)


class ScratchDir:
    """A private directory, made once, for a tool that writes files *by path* again and again
    (``export_chrome_trace(path)`` once per capture)::

        scratch = ScratchDir(directory, run_dir)          # at the first capture
        profile.export_chrome_trace(str(scratch.path_for("trace.json")))
        ...                                               # read it, write the real file with open_file
        scratch.remove("trace.json")
        scratch.close()                                   # at finalize

    Why not :func:`tool_output` per file: a directory made and removed per capture costs a mkdir, a
    directory scan and an rmdir every time, most of rlprof's fixed cost per torch capture
    (bench/bench_torch_overhead.py). Reusing one keeps the same guarantees:

    * it is created relative to its parent's descriptor (the chain walked as :func:`ensure_dir` does),
      with mode 0o700 and a random name, then opened once with ``O_NOFOLLOW``; the descriptor's owner
      and mode are checked, so only this user can put anything inside;
    * the paths it hands out lead through that descriptor (``/proc/self/fd/<fd>/<name>``), so if
      the directory's name is swapped for a link later in the run, the tool still writes into the
      directory opened here. Where there is no ``/proc`` each path is handed out only after
      checking that the name still is that directory (the window a fresh ``mkdtemp`` had too);
    * files are removed by name relative to the descriptor, and :meth:`close` removes the directory.
    """

    def __init__(self, parent: Path, root: Path):
        parent = Path(parent)
        name = f".rlprof-scratch-{secrets.token_hex(6)}"
        self.path = parent / name
        parent_fd = _open_dir_chain(parent, Path(root))
        try:
            _audited(self.path, os.mkdir, name, 0o700, dir_fd=parent_fd)
            self._fd: int | None = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        finally:
            os.close(parent_fd)
        info = os.fstat(self._fd)
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            self.close()
            raise UnsafePathError(errno.EPERM, "refusing a scratch directory others can write in", str(self.path))
        through_fd = Path(f"/proc/self/fd/{self._fd}")
        self._through_fd = through_fd if os.path.isdir(through_fd) else None

    def path_for(self, name: str) -> Path:
        """The path to give the tool for a file ``name`` in this directory."""
        if self._fd is None:
            raise ValueError(f"scratch directory {self.path} is closed")
        if self._through_fd is not None:
            return self._through_fd / name
        seen, held = os.lstat(self.path), os.fstat(self._fd)
        if (seen.st_dev, seen.st_ino) != (held.st_dev, held.st_ino):
            raise UnsafePathError(errno.EXDEV, "the scratch directory was replaced", str(self.path))
        return self.path / name

    def remove(self, name: str) -> None:
        """Remove the file ``name`` from this directory, if it is there."""
        if self._fd is not None:
            try:
                os.unlink(name, dir_fd=self._fd)
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Remove what is left in the directory and the directory itself. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            for name in os.listdir(fd):
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass  # not a file the tool left (nothing else can be in here); rmdir below says so
        finally:
            os.close(fd)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def place(source: Path, target: Path, root: Path) -> Path:
    """Put the regular file ``source`` at ``target`` (under ``root``) without following a link and
    without replacing anything: a hard link made relative to the target directory's descriptor
    (``link(2)`` fails on any existing name, a dangling link included), or a copy through
    :func:`open_file` when ``source`` is on another file system. ``source`` stays; the caller removes it.
    Raises :class:`UnsafePathError` for a link at ``target``, ``FileExistsError`` for a file there."""
    import shutil

    source, target = Path(source), Path(target)
    if not stat.S_ISREG(os.stat(source, follow_symlinks=False).st_mode):
        raise UnsafePathError(errno.EINVAL, "only a regular file can be placed", str(source))
    dir_fd = _open_dir_chain(target.parent, root)
    try:
        try:
            os.link(source, target.name, dst_dir_fd=dir_fd, follow_symlinks=False)
            return target
        except FileExistsError:
            if _is_link(target.name, dir_fd):
                raise UnsafePathError(errno.EEXIST, "refusing to write through a symbolic link", str(target)) from None
            raise
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
    finally:
        os.close(dir_fd)
    with open(source, "rb") as reader, new_file(target, root) as writer:  # another file system
        shutil.copyfileobj(reader, writer, 1 << 20)
    return target


@contextmanager
def new_file(path: Path, root: Path) -> Iterator[IO]:
    """A new binary file at ``path`` (:func:`open_file` mode ``"wb"``: no link followed, nothing
    replaced) that is removed again when the block raises (a full disk), so no half-written
    trace or snapshot is left for a report to count."""
    with open_file(path, root, "wb") as handle:
        try:
            yield handle
        except BaseException:
            try:
                os.unlink(path)  # ours: open_file created it (O_EXCL) a moment ago
            except OSError:
                pass
            raise


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_dir_chain(path: Path, root: Path) -> int:
    """A file descriptor of directory ``path``, every component from ``root`` down created if
    missing and opened with ``O_NOFOLLOW`` relative to its parent's descriptor.

    Paths are handled as strings here, not :class:`~pathlib.Path` objects: every capture walks its
    directory at least twice, and pathlib's parsing was two thirds of a walk's time. The run directory
    and the last directory walked to stay open (:class:`_HeldDirs`): a capture's second walk costs a
    ``stat`` and a ``dup``, and a new capture's chain is walked from the run directory down."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    fd = _HELD.reuse(path, root)
    if fd is not None:
        return fd
    if root == os.sep:
        raise UnsafePathError(errno.EINVAL, "refusing to use the file-system root as a run directory", root)
    if path != root and not path.startswith(root + os.sep):
        raise UnsafePathError(errno.EXDEV, f"not under the run directory {root}", path)
    base = _HELD.reuse(root, root)
    if base is None:
        parent, root_name = os.path.split(root)
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)  # the user's part of the path: links there are theirs
        base = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)
        base = _descend(base, parent, [root_name])
        _keep(root, root, base)
    fd = _descend(base, root, path[len(root) + 1:].split(os.sep)) if path != root else base
    if path != root:
        _keep(path, root, fd)
    return fd


def _keep(path: str, root: str, fd: int) -> None:
    try:
        _HELD.hold(path, root, fd)
    except OSError:
        pass  # out of descriptors: the next call walks again


def _descend(fd: int, current: str, names: list[str]) -> int:
    """From the directory ``fd`` (at ``current``; the descriptor is consumed), open or create each of
    ``names`` in turn with ``O_NOFOLLOW``; the last one's descriptor.

    Each name is made first and opened after (a new capture's chain is new: one ``mkdir`` and one
    ``open`` per level); a name that exists (another rank made it, or a link was planted) gives
    ``EEXIST``, and the ``O_NOFOLLOW`` open then refuses a link."""
    try:
        for name in names:
            current = os.path.join(current, name)
            try:
                denied = None
                try:
                    _audited(current, os.mkdir, name, 0o777, dir_fd=fd)  # a link at ``name``: EEXIST
                except FileExistsError:
                    pass  # made meanwhile (another rank), or a link: the open below tells
                except PermissionError as exc:
                    denied = exc  # perhaps there already, in a directory we may not write to
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if denied is not None:
                        raise denied from None
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    what = "a symbolic link" if _is_link(name, fd) else "not a directory"
                    raise UnsafePathError(exc.errno, f"refusing to create files under {what}", current) from None
                raise
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise
