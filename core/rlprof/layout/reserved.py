"""Names that are never taken twice: a file rlprof names itself is claimed before its bytes come.

A file rlprof names itself (a trace, a snapshot, an engine's file moved
in) may find its name taken, by another Profiler of the same run and rank in the same process (a worker
set up twice: the same capture directories) or by a trace of that Profiler still being written in the
background. :func:`reserve` claims the name (``<name>.partial``, created at once) or the first free
:func:`numbered` one (``rank0.1.pt.trace.json.gz``) before the bytes come, so each writer keeps its file,
under the name the manifest lists, whatever order they write and place in; :func:`write_reserved` and
:func:`place_reserved` do the same for a file written at once or moved in.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from rlprof.layout.safe_io import _FILE_FLAGS, UnsafePathError, _open_dir_chain, _open_in, place


PARTIAL_SUFFIX = ".partial"
"""A file rlprof is still writing is ``<its final name>.partial`` (:class:`Reserved`): a name no reader takes for
a trace, and the mark that its final name is claimed."""
MAX_NUMBER = 9999
""":func:`reserve` tries ``path`` and its numbered names up to this number."""


def numbered(path: os.PathLike | str, n: int) -> Path:
    """``path`` with ``.n`` after the first part of its name: ``rank0.pt.trace.json.gz`` -> ``rank0.1.pt.trace.json.gz``,
    ``snapshot.pickle`` -> ``snapshot.1.pickle``, ``report`` -> ``report.1``; ``n == 0``: ``path`` itself. Every
    suffix stays, so whatever finds files by their suffix (trace readers, ``*.json.gz``) finds this one too."""
    path = Path(path)
    return path if n == 0 else path.with_name(_numbered_name(path.name, n))


def _numbered_name(name: str, n: int) -> str:
    if n == 0:
        return name
    lead = len(name) - len(name.lstrip("."))
    stem, dot, rest = name[lead:].partition(".")
    return f"{name[:lead]}{stem}.{n}{dot}{rest}"


class Reserved:
    """A file name claimed for a file whose bytes come later: from a background thread (a torch trace, listed in
    the manifest under this name when its capture closes), or from a tool, then moved in. Made by :func:`reserve`.

    Write through :attr:`handle` (a new binary file at ``<path>.partial``), then :meth:`place` it, or
    :meth:`abandon` it on an error. Until one of the two, the ``.partial`` file holds the claim: no other
    :func:`reserve` in any process takes :attr:`path` (nor does a killed writer's leftover ``.partial``
    let its name be taken again)."""

    __slots__ = ("path", "root", "handle")

    def __init__(self, path: Path, root: Path, handle: IO[bytes]):
        self.path = path
        """The final name (``path`` as asked, or its first free numbered name)."""
        self.root = root
        self.handle = handle

    @property
    def partial(self) -> Path:
        return self.path.with_name(self.path.name + PARTIAL_SUFFIX)

    def place(self) -> Path:
        """Close :attr:`handle` and put the file under :attr:`path` with :func:`place` (a hard link: it
        appears whole or not at all, never over anything, never through a link); the ``.partial`` name is
        removed either way. Raises what :func:`place` raises (then nothing is under :attr:`path`)."""
        self.handle.close()
        try:
            place(self.partial, self.path, self.root)
        finally:
            self._remove_partial()
        return self.path

    def abandon(self) -> None:
        """Give the name up: close :attr:`handle` and remove the ``.partial`` file. Idempotent."""
        self.handle.close()
        self._remove_partial()

    def _remove_partial(self) -> None:
        try:
            dir_fd = _open_dir_chain(self.path.parent, self.root)
        except OSError:
            return  # the directory is gone (or was swapped for a link): nothing of ours to remove there
        try:
            os.unlink(self.partial.name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(dir_fd)


def reserve(path: os.PathLike | str, root: os.PathLike | str) -> Reserved:
    """Claim a name for a new file under ``root``: ``path`` when it is free, else the first free
    :func:`numbered` name (``rank0.1.pt.trace.json.gz``, ``rank0.2...``). The one rule every rlprof writer
    that names its own files follows, so two writers wanting one name (two Profilers of one run and rank in
    one process, a finalize while the other's trace is still being written, a process reusing a pid of the
    run) each keep their file and nothing is replaced, whatever order they write and place in.

    A name is free when neither it nor its ``.partial`` exists. The claim is ``<name>.partial``, created with
    ``O_EXCL`` (nothing replaced, no link followed, :func:`open_file`'s checks) *before* the final name is
    looked at: a writer places its file while still holding its ``.partial`` (:meth:`Reserved.place`), so
    once our ``.partial`` exists, a final name that is absent stays ours. A symbolic link at the final
    name is refused (:class:`UnsafePathError`), as :func:`open_file` refuses one.

    :raises UnsafePathError: a link in the way (see :func:`open_file`).
    :raises FileExistsError: every name up to :data:`MAX_NUMBER` is taken."""
    parent, name = os.path.split(os.path.normpath(path))
    root = Path(root)
    dir_fd = _open_dir_chain(parent, root)
    try:
        for n in range(MAX_NUMBER + 1):
            final = _numbered_name(name, n)
            if _taken(final, dir_fd, parent):  # a quick look first: most taken names are placed files
                continue
            partial = final + PARTIAL_SUFFIX
            try:
                handle = _open_in(dir_fd, partial, os.path.join(parent, partial), "wb", _FILE_FLAGS["wb"])
            except FileExistsError:
                continue  # claimed by a writer still at work, or left by one that was killed
            try:
                if not _taken(final, dir_fd, parent):  # the look that counts: made while our claim exists
                    return Reserved(Path(parent) / final, root, handle)
            except BaseException:
                handle.close()
                os.unlink(partial, dir_fd=dir_fd)
                raise
            handle.close()
            os.unlink(partial, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    raise FileExistsError(errno.EEXIST, f"{name} and its numbered names up to .{MAX_NUMBER} are all taken", str(path))


def _taken(name: str, dir_fd: int, parent: str) -> bool:
    """Whether something is at ``name`` in the directory ``dir_fd``; a symbolic link there is refused."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        raise UnsafePathError(errno.EEXIST, "refusing to write through a symbolic link", os.path.join(parent, name))
    return True


@contextmanager
def write_reserved(path: os.PathLike | str, root: os.PathLike | str) -> Iterator[Reserved]:
    """Write a new file at ``path``, or at its first free numbered name when that is taken (:func:`reserve`),
    in one go: write to ``reserved.handle`` inside the block; when it ends, the file is placed under
    ``reserved.path`` (whole, or not at all); on an exception nothing is left::

        with write_reserved(directory / "rank0.memory_snapshot.pickle", run_dir) as reserved:
            pickle.dump(snapshot, reserved.handle)
        ctx.add_artifact(reserved.path)
    """
    reserved = reserve(path, root)
    try:
        yield reserved
    except BaseException:
        reserved.abandon()
        raise
    reserved.place()


def place_reserved(source: os.PathLike | str, target: os.PathLike | str, root: os.PathLike | str) -> Path:
    """:func:`place` ``source`` at ``target``, or at its first free numbered name when that is taken
    (:func:`reserve`); where it is now. For files a tool wrote elsewhere (an engine's traces): every one is
    kept, none replaced. ``source`` stays; the caller removes it."""
    reserved = reserve(target, root)
    try:
        reserved.handle.close()
        return place(source, reserved.path, root)
    finally:
        reserved.abandon()
