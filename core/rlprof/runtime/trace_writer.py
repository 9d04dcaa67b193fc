"""Writing traces off the thread that captured them: compression, checksum and placing under the final name.

A profiler writes its trace where it must (torch's export, an inference engine's own profiler); what
comes after is rlprof's, and none of it has to hold up training or generation. Each trace is an
:class:`Export` handed to the process's :class:`TraceWriter`, one daemon thread with a queue:

0. when the export has a ``dump`` (the torch backend: a stopped profiler's export, then freeing torch's
   result), run it first, writing the plain JSON into the export's folder;
1. gzip the plain JSON into ``<final>.partial`` (a name no reader takes for a trace), hashing the
   compressed bytes (sha256) as they are written;
2. put it under its final name with :meth:`rlprof.layout.Reserved.place` (a hard link: it appears whole or
   not at all, never over an existing file, never through a link), then remove ``.partial`` and the plain JSON.

Who hands exports over: the torch backend (rlprof-torch: its traces, exported into its private
:class:`rlprof.layout.ScratchDir`), and a rollout replica whose engine wrote plain JSON
(:mod:`rlprof.integrations.engines.plain_traces`: vLLM's own gzip export is torch's line-by-line level-9
path, seconds inside the engine's busy loop, so its adapter asks for plain JSON and the replica compresses
here, in :class:`Folder`, the engine's directory).

The final name is claimed before any of this (:func:`rlprof.layout.reserve`: ``<final>.partial`` is
created then): the manifest lists the trace under the name it will have, and a second writer wanting
the same name (another Profiler of the same run and rank in this process) gets the next free name
(``rank0.1.pt.trace.json.gz``) instead of failing or replacing, whatever order the two are written in.

So a process killed mid-export leaves at most a ``.partial`` file and the plain JSON, never a file
under a final name that does not load. Which captures are still being written is in the manifest: the
owner lists each trace when it hands it over with ``state: "writing"``, and again with ``state:
"written"`` (size, sha256) once it is in place (see :func:`rlprof.manifest.settled_artifacts`).

zlib, hashlib and file reads release the GIL, so compressing beside the training costs the training
little time on a machine with a core to spare.
"""

from __future__ import annotations

import collections
import gzip
import hashlib
import logging
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from rlprof.layout import Reserved, new_file

log = logging.getLogger("rlprof")

GZIP_LEVEL = 6
"""zlib's default: about 10% larger than level 9 and several times faster on trace JSON."""


class Source(Protocol):
    """Where an export's plain JSON waits: :class:`rlprof.layout.ScratchDir` (the torch backend's private
    directory) or :class:`Folder` (an engine's directory)."""

    def path_for(self, name: str) -> Path:
        """The path of the file ``name`` in it."""

    def remove(self, name: str) -> None:
        """Remove the file ``name`` from it, if it is there."""


class Folder:
    """A directory a tool already wrote a plain trace in (an engine's ``torch_profiler_dir``), as a
    :class:`Source`: the file is read from there and removed once compressed (or once it failed)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def path_for(self, name: str) -> Path:
        return self.path / name

    def remove(self, name: str) -> None:
        try:
            os.unlink(self.path / name)
        except FileNotFoundError:
            pass


@dataclass(eq=False)
class Export:
    """One trace on its way from a plain JSON file to its final, compressed name."""

    folder: Source
    """Where the plain JSON is (or is dumped)."""
    plain_name: str
    """Its name in ``folder``."""
    target: Reserved
    """The trace's final name, claimed when it was handed over: compressed into its ``.partial`` file,
    then placed (:func:`rlprof.layout.reserve`)."""
    belongs: dict[str, Any]
    """What the trace belongs to (its capture, step numbers, region...), repeated in its ``written`` record."""
    owner: object
    """Who handed it over (a backend instance): only its owner is told it is done."""
    dump: Callable[[Path], None] | None = None
    """Writes the plain JSON to the path it is given (a stopped profiler's export), first thing on the
    writer's thread; None when it is already there. Dropped once run: it holds the profiler's events."""
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    sha256: str | None = None

    @property
    def final(self) -> Path:
        return self.target.path

    @property
    def partial(self) -> Path:
        return self.target.partial


def compress(export: Export) -> None:
    """Gzip, hash and place one export (see the module docstring); a failure leaves no final file and
    no ``.partial`` behind and is kept in ``export.error``. The plain JSON is removed either way."""
    digest = hashlib.sha256()
    try:
        dump, export.dump = export.dump, None
        if dump is not None:
            dump(export.folder.path_for(export.plain_name))
        with open(export.folder.path_for(export.plain_name), "rb") as source:
            gzip_stream(source, export.target.handle, export.final.name, digest)
        export.target.place()
        export.sha256 = digest.hexdigest()
    except BaseException as exc:  # noqa: BLE001 - kept for the hook that reports it
        export.error = exc
        export.target.abandon()
    finally:
        export.folder.remove(export.plain_name)


def gzip_into(plain: Path, packed: Path, root: Path, digest: Any = None) -> Path:
    """Compress ``plain`` into a new file ``packed`` under ``root`` (:func:`rlprof.layout.new_file`: no
    link followed, an existing file never replaced, removed again on an error such as a full disk),
    feeding the compressed bytes to ``digest`` (a :mod:`hashlib` object) when given.

    torch's own ``.gz`` export goes through a temporary file in the system temp directory and
    recompresses it line by line at level 9, several times slower than exporting plain JSON and
    compressing it in large blocks here (bench/bench_torch_overhead.py measures both)."""
    with open(plain, "rb") as source, new_file(packed, root) as raw:
        gzip_stream(source, raw, packed.name, digest)
    return packed


def gzip_stream(source: Any, raw: Any, name: str, digest: Any = None) -> None:
    """Compress the binary file object ``source`` into ``raw`` as one gzip member naming ``name`` (without
    its ``.gz``), feeding the compressed bytes to ``digest`` when given. ``raw`` is left open."""
    sink = raw if digest is None else _Hashing(raw, digest)
    name = name[:-3] if name.endswith(".gz") else name
    with gzip.GzipFile(filename=name, mode="wb", fileobj=sink, compresslevel=GZIP_LEVEL) as target:
        shutil.copyfileobj(source, target, 1 << 20)


def gzip_beside(plain: Path) -> Path:
    """Compress ``plain`` into ``<plain>.gz`` in the same directory and remove ``plain`` (what a raw
    script does; the benches' reference)."""
    packed = gzip_into(plain, plain.with_name(plain.name + ".gz"), plain.parent)
    plain.unlink()
    return packed


class _Hashing:
    """A write-only file object that hashes what passes through it into ``digest``."""

    def __init__(self, raw, digest):
        self.raw, self.digest = raw, digest

    def write(self, data) -> int:
        self.digest.update(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()


class TraceWriter:
    """The process's background writer: one daemon thread, started at the first export, that runs
    :func:`compress` on each export in the order they came. Owners collect their finished exports
    with :meth:`finished` (from their next hook call) and wait for the rest with :meth:`wait`."""

    def __init__(self) -> None:
        self._queue: "queue.SimpleQueue[Export | Callable[[], None]]" = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._finished: "collections.deque[Export]" = collections.deque()
        self._pending: list[Export] = []
        """Handed over and not yet collected, in order (finished or not)."""

    def submit(self, export: Export) -> None:
        with self._lock:
            self._pending.append(export)
            self._start()
        self._queue.put(export)

    def then(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the writer's thread after every export handed over so far: a backend finalized
        while some of its traces were still being written closes its scratch directory this way, so those
        traces still reach their names if the process lives long enough. Its failure is logged."""
        with self._lock:
            self._start()
        self._queue.put(action)

    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="rlprof-trace-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            export = self._queue.get()
            if not isinstance(export, Export):
                try:
                    export()
                except Exception:  # noqa: BLE001 - a clean-up; the traces are what matters
                    log.exception("rlprof: a clean-up after writing traces failed")
                continue
            compress(export)
            with self._lock:  # finished() rebuilds the deque under this lock: no append may fall between
                export.done.set()
                self._finished.append(export)

    def has_finished(self) -> bool:
        """Anything finished and not yet collected (a cheap check for the hot path)."""
        return bool(self._finished)

    def finished(self, owner: object) -> list[Export]:
        """``owner``'s exports that finished since it last asked, in the order they were handed over."""
        with self._lock:
            done = [e for e in self._pending if e.owner is owner and e.done.is_set()]
            if done:
                self._pending = [e for e in self._pending if e not in done]
                kept = [e for e in self._finished if e.owner is not owner]
                self._finished.clear()
                self._finished.extend(kept)
        return done

    def export_for(self, path: Any) -> Export | None:
        """The export handed over for the final name ``path`` and not collected by its owner yet, finished or not
        (None: none): what :mod:`rlprof.runtime.split_analyser` waits on, since an owner collects its finished
        exports only at its next hook call, which a run's last capture never gets before finalize."""
        with self._lock:
            return next((e for e in self._pending if str(e.final) == str(path)), None)

    def wait(self, owner: object, timeout_s: float) -> list[Export]:
        """Wait up to ``timeout_s`` for ``owner``'s exports; the ones still unfinished (left running)."""
        with self._lock:
            mine = [e for e in self._pending if e.owner is owner]
        deadline = time.monotonic() + timeout_s
        for export in mine:
            export.done.wait(max(0.0, deadline - time.monotonic()))
        return [e for e in mine if not e.done.is_set()]

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until every export handed over so far is finished, whoever handed
        it over, and every clean-up queued behind them (:meth:`then`) has run; True when they all are
        (benches and tests keep one step's writing out of the next)."""
        with self._lock:
            handed = list(self._pending)
        deadline = time.monotonic() + timeout_s
        if not all(e.done.wait(max(0.0, deadline - time.monotonic())) for e in handed):
            return False
        drained = threading.Event()
        self.then(drained.set)  # the queue is in order: this runs after every clean-up queued so far
        return drained.wait(max(0.0, deadline - time.monotonic()))


_writer: TraceWriter | None = None
_writer_lock = threading.Lock()


def process_writer() -> TraceWriter:
    """The writer of this process (one thread however many owners; made at the first export)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = TraceWriter()
        return _writer


def pending_export(path: Any) -> Export | None:
    """:meth:`TraceWriter.export_for` of this process's writer (None when it has none: nothing was handed over)."""
    writer = _writer
    return writer.export_for(path) if writer is not None else None


def _forget_in_child() -> None:
    """A forked child has no writer thread: it makes its own at its first export."""
    global _writer, _writer_lock
    _writer, _writer_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
