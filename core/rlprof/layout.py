"""Where things go under ``save_path``. One layout for every backend; nothing is ever overwritten.

::

    <save_path>/<run_id>/                              one directory per run (run ids never repeat)
        <capture_id>/rank<R>-<host>-<pid>/<backend>/   a capture's files, e.g. step3/rank0-node1-4242/torch/
        _process/rank<R>-<host>-<pid>/<backend>/       files not tied to a capture (finalize)
        manifest/rank<R>-<host>-<pid>.jsonl            what this process wrote (see rlprof.manifest)

``capture_id`` is ``step<N>`` (end-to-end), ``step<A>-<B>`` (merged continuous steps) or
``step<N>.<region>`` (discrete), with ``.<k>`` appended when a region repeats within a step or a
sampled region has several windows. Every name from user input passes :func:`safe_name`.

Writing safely (``save_path`` is often shared on a cluster, so anyone who can write there could plant
a symbolic link where rlprof is about to write): every directory and file the core creates under a run
goes through :func:`ensure_dir` / :func:`open_file`, which walk the path one component at a time with
directory file descriptors and ``O_NOFOLLOW``, so a link planted as the run directory, an intermediate
directory, a trace or a manifest name is refused (:class:`UnsafePathError`) instead of followed, and a
file that exists is never replaced. :func:`check_save_path` says in plain words why a ``save_path``
cannot be used, before anything is written.

Names that are never taken twice: a file rlprof names itself (a trace, a snapshot, an engine's file moved
in) may find its name taken, by another Profiler of the same run and rank in the same process (a worker
set up twice: the same capture directories) or by a trace of that Profiler still being written in the
background. :func:`reserve` claims the name (``<name>.partial``, created at once) or the first free
:func:`numbered` one (``rank0.1.pt.trace.json.gz``) before the bytes come, so each writer keeps its file,
under the name the manifest lists, whatever order they write and place in; :func:`write_reserved` and
:func:`place_reserved` do the same for a file written at once or moved in.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import socket
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

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
PEAK_DIR = "peak"
LATE_DIR = "late_splits"
CORE_DIRS = (MANIFEST_DIR, BUDGET_DIR, BREAKDOWN_DIR, REQUESTS_DIR, PEAK_DIR, LATE_DIR)
"""The folders of a run directory the core writes itself, beside the captures: every process's manifest,
each node's count of bytes written (:mod:`rlprof.runtime.budget`), on a Ray controller the breakdown
rows its nodes shipped (:func:`shipped_rows_path`), an armed run's capture requests and answers
(:mod:`rlprof.runtime.unplanned`), each host's measured peak FLOP/s (:func:`rlprof.peak.run_peak`), and the
splits a process handed on as it ended, until written (:mod:`rlprof.analysis.late_split`).
No backend writes there."""


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


# ---------------------------------------------------------------------- writing without following links


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


# ---------------------------------------------------------------------- names that are never taken twice


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


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


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
