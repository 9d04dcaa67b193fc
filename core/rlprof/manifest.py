"""The manifest: one JSON-lines file per process, merged on read; and the one place records are built.

Each line is a record with a ``type`` and the common fields ``run``, ``rank``, ``host``, ``pid``, ``time``:

* ``process``  — one per Profiler that will profile (colocated Profilers of one process each write
  one into the shared file; readers take the union of ``roles``): the fields of :class:`ProcessRecord`.
* ``artifact`` — one file or directory a backend produced: step(s), role(s), region, backend,
  capture, path (relative to the run directory), size in bytes, kind, iterations. A backend that
  writes in the background lists a file twice: ``state: "writing"`` when its capture closes, then
  ``state: "written"`` (its size, ``sha256``) or ``"failed"`` (``error``) once that is settled;
  readers take the pair as one record (:func:`settled_artifacts`), and a ``writing`` left alone names
  a file the process never finished (killed, or still writing when finalize stopped waiting).
* ``capture``  — one per capture as it closes: the fields of :class:`CaptureRecord`.
* ``step``     — one per profiled step of the process: ``step``, ``start_ns``, ``end_ns``
  (``time.time_ns()``, the host's shared wall clock), ``duration_ms``.
* ``unprofiled_steps`` — steps a profiling process ran without profiling them: the fields of :class:`UnprofiledStepsRecord`.
* ``region``   — one per region of a selected role entered during a profiled step, for the whole
  region: ``step``, ``role``, ``region``, ``parent`` (the enclosing open region, or None), ``depth``,
  ``capture`` (the first capture it was in), ``start_ns``, ``end_ns``, ``duration_ms``,
  ``iterations`` (``[first, last]`` captured when sampled), ``marked_iterations``, ``error``.
  Count only ``depth`` 0 towards a step's total (nested regions are inside their parents).
* ``error``    — something failed and was contained: ``kind`` ``hook`` (a backend raised),
  ``return`` (a hook returned something that is not a path), ``write`` (the core could not write),
  ``timeout`` (the hook watchdog), ``environment`` (``check_environment`` raised or reported a
  problem); ``backend``, ``hook``, ``error`` (the message), and details.
* ``warning``  — something the user should know that failed nothing: kind ``backend`` (a backend's
  ``ctx.warn``: ``backend``, ``hook``, ``message``, ``step``, ``capture``, ``region``) or kind
  ``colocated`` (a later Profiler of the process disagreed with its session: ``key``, ``message``, ``roles``).
* ``skip``     — a backend said a capture writes nothing, and why (``ctx.skip``): ``backend``, ``hook``,
  ``reason``, ``capture``, ``steps``, ``roles``, ``region``. Such a capture is explained, not missing.
  The core writes one per backend for each step x roles a budget left out: ``by`` ``budget``, ``budget``
  (``capture_budget_mb`` or ``run_budget_gb``), ``limit_bytes``, ``measured_bytes``, ``measured`` (what went over).
* ``cleanup``  — the core released a backend that had raised: ``backend``, ``closed`` (capture ids
  it closed for it), ``finalized`` (its finalize ran without raising).
* ``profiling_wait`` — training waited for profiling's own work outside a hook (a rollout replica's
  trace export still running when its next generate came): ``source`` (the engine), ``step``,
  ``replica_rank``, ``capture`` (the engine capture waited for), ``start_ns``, ``end_ns``, ``ms``. The
  report counts it as profiling's cost of that step.
* ``phase``    — a phase of the training driver's own step, as the driver times it: the fields of :class:`PhaseRecord`.
* ``staleness`` — how far behind the trainer's weights the samples of an asynchronous run's step were:
  the fields of :class:`StalenessRecord`.
* ``finalized``— a Profiler finalized (reason). Its absence means the process died first.
* ``worker_failure`` — written by the Ray controller (``manifest/controller-<host>-<pid>.jsonl``) for a
  worker that died, hung past the timeout or raised in an rlprof call (see :mod:`rlprof.ray`).
* ``node``     — first line of a manifest the Ray controller gathered from another node: the fields of :class:`NodeRecord`.
* ``node_lost`` — the controller found a node dead: the fields of :class:`NodeLostRecord`.
* ``gathered`` — ``global_profiler.gather: traces`` moved (or did not move) one file to the controller:
  ``node``, ``source`` (absolute path on the node), ``path`` (relative to the controller's run
  directory), ``size``, ``sha256``, ``status`` (``verified``, ``exists``, ``failed``, ``over_budget``),
  ``deleted_local``.

A record type declared as a dataclass (:class:`ProcessRecord`, :class:`CaptureRecord`, :class:`PhaseRecord`, ...;
new record types follow them) is declared once: the writer builds one and writes its fields (:func:`record_fields`), the
reader reads one back (:func:`read_record`), each field typed, defaulted and documented where it is
declared, and the report's check of a usable record (:func:`required`, ``rlprof.analysis.runs.REQUIRED``)
comes from it, so a new field is one edit, read by both sides.

Lines are appended and flushed as they happen (timing records at the end of each step), so a process
killed mid-run keeps what it recorded. Writing never raises into training: a failed write (disk
full) is logged once, counted, and recorded as an ``error`` of kind ``write`` once writing works again.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator, TypeVar

from rlprof.context import context_field
from rlprof.layout import relative

log = logging.getLogger("rlprof")
FAILURE_RECORD = "worker_failure"
"""Manifest record type the Ray controller writes (``manifest/controller-<host>-<pid>.jsonl``): one per
worker that died or hung past the timeout (it is not waited for again), one per rlprof call that
raised in a worker: worker, rank, call, step, kind, error."""
GATHERED_RECORD = "gathered"
"""One file ``gather: traces`` streamed to the controller (or could not): where from, where to, checksum."""


def short_node(node: str | None) -> str:
    """A Ray node id as logs and reports name it: its first 8 hex digits (as ``ray status`` abbreviates)."""
    return node[:8] if node else "?"


_ENCODER = json.JSONEncoder(default=str, check_circular=False)
"""One encoder for every record (``json.dumps(..., default=str)`` builds a new one per call). Records
are plain data; anything else (a path, an exception) is written as its ``str``."""


def path_size(path: os.PathLike | str) -> int:
    """Bytes in a file, or in all files under a directory; 0 when it cannot be read."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
        return info.st_size
    except OSError:
        return 0


class ManifestWriter:
    """Appends records to one process's manifest; each line is flushed as it is written, so a process
    killed later keeps everything it recorded. The file stays open (one open per process, not per line),
    is opened without following symbolic links under ``root``, and is only ever appended to.

    :meth:`write` never raises: an ``OSError`` (disk full, file removed, directory made read-only) is
    logged once, counted in :attr:`lost`, and reported by an ``error`` record (kind ``write``) as soon
    as a later write succeeds."""

    def __init__(self, path: Path, common: dict[str, Any], root: Path | None = None):
        self.path = path
        self.common = common
        self.root = root if root is not None else path.parent
        self.lost = 0
        """Records that could not be written."""
        self._handle = None
        self._problem: str | None = None
        self._told = False
        self._lock = threading.Lock()
        """Records also come from the hook watchdog's thread while training holds the Profiler's lock."""

    def write(self, record_type: str, **fields: Any) -> bool:
        """Append one record; False when it could not be written (never raises)."""
        with self._lock:
            return self._write([self._line(record_type, **fields)])

    def write_record(self, record: Any) -> bool:
        """Append one typed record (:class:`ProcessRecord`...): its ``TYPE`` and its fields."""
        return self.write(record.TYPE, **record_fields(record))

    def write_many(self, records: Iterable[tuple[str, dict[str, Any]]]) -> bool:
        """Append ``(type, fields)`` records in one write and one flush (a step's timing records)."""
        with self._lock:
            lines = [self._line(record_type, **fields) for record_type, fields in records]
            return self._write(lines) if lines else True

    def _write(self, lines: list[str]) -> bool:
        if self._problem is not None and self._append(self._line("error", kind="write", backend=None, hook=None,
                                                                  error=self._problem, lost=self.lost)):
            self._problem = None
        if self._append("\n".join(lines)):
            return True
        self.lost += len(lines)
        return False

    def _line(self, record_type: str, **fields: Any) -> str:
        record = {"type": record_type, **self.common, **fields, "time": round(time.time(), 3)}
        return _ENCODER.encode(record)

    def _append(self, line: str) -> bool:
        try:
            if self._handle is None or self._handle.closed:
                self._handle = _open_append(self.path, self.root)
            self._handle.write(line + "\n")
            self._handle.flush()
            return True
        except (OSError, ValueError) as exc:  # ValueError: a handle closed under us
            self._problem = f"{type(exc).__name__}: {exc}"
            if not self._told:
                self._told = True
                log.error("rlprof: cannot write the manifest %s (%s); training goes on, records are counted as lost "
                          "and the failure is recorded once writing works again", self.path, self._problem)
            self._drop_handle()
            return False

    def _drop_handle(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        with self._lock:
            self._drop_handle()


def _open_append(path: Path, root: Path):
    """Open ``path`` for appending, creating its directory under ``root``; no symbolic link is followed
    (:func:`rlprof.layout.open_file`)."""
    from rlprof.layout import open_file

    return open_file(path, root, "a")


# --------------------------------------------------------------------------- records


def describe_error(exc: BaseException | None) -> str | None:
    """``"ValueError: message"``, the form every record uses for an exception."""
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def step_record(step: int, start_ns: int, end_ns: int, closed_ns: int | None = None) -> dict[str, Any]:
    """``closed_ns``: when the captures the step closed were written (after ``end_ns``): the time
    profiling itself took at the step's end, which the report shows apart from the step's own work."""
    record = {"step": step, "start_ns": start_ns, "end_ns": end_ns, "duration_ms": round((end_ns - start_ns) / 1e6, 6)}
    if closed_ns is not None:
        record["closed_ns"] = closed_ns
    return record


def phase_record(step: int, name: str, start_ns: int, end_ns: int, source: str) -> dict[str, Any]:
    """The ``phase`` record (:class:`PhaseRecord`) of the driver's phase ``name`` of ``step`` (``time.time_ns()`` bounds)."""
    return record_fields(PhaseRecord(step=step, name=name, source=source, start_ns=start_ns, end_ns=end_ns,
                                     duration_ms=round((end_ns - start_ns) / 1e6, 6)))


def plain_steps_record(steps: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The ``unprofiled_steps`` record (:class:`UnprofiledStepsRecord`) of ``(step, start_ns, end_ns)`` triples."""
    numbers, starts, ends = zip(*steps)
    return record_fields(UnprofiledStepsRecord(steps=list(numbers), start_ns=list(starts), end_ns=list(ends)))


def region_record(region: Any) -> dict[str, Any]:
    """The ``region`` record of a closed :class:`rlprof.runtime.capture_machine.OpenRegion`."""
    parent = region.parent
    return {
        "step": region.step, "role": region.role, "region": region.name,
        "parent": parent.name if parent is not None else None, "depth": region.depth,
        "capture": region.capture, "start_ns": region.start_ns, "end_ns": region.end_ns, "closed_ns": region.closed_ns,
        "duration_ms": round((region.end_ns - region.start_ns) / 1e6, 6),
        "iterations": list(region.sampled) if region.sampled is not None else None,
        "marked_iterations": region.marked, "error": describe_error(region.error),
    }


def wait_record(source: str, start_ns: int, end_ns: int, **details: Any) -> dict[str, Any]:
    """The ``profiling_wait`` record of a wait from ``start_ns`` to ``end_ns`` (``time.time_ns()``)."""
    return {"source": source, "start_ns": start_ns, "end_ns": end_ns, "ms": round((end_ns - start_ns) / 1e6, 3),
            **details}


def error_record(backend: str | None, hook: str | None, kind: str, error: str, **details: Any) -> dict[str, Any]:
    return {"kind": kind, "backend": backend, "hook": hook, "error": error, **details}


def artifact_record(backend: str, ctx: Any, path: os.PathLike | str, kind: str, extra: dict[str, Any], *, run_dir: Path,
                    world_size: int, mode: str, selected_roles: Iterable[str]) -> dict[str, Any]:
    """One artifact; what the file belongs to comes from the call's context (its capture's steps,
    else its step; its role, else the process's selected roles), unless ``extra`` names it."""
    capture = ctx.capture
    step = context_field(ctx, "step")
    steps = list(capture.steps) if capture else ([step] if step is not None else [])
    role = context_field(ctx, "role")
    iterations = context_field(ctx, "iterations")
    shown, within = _in_run(path, run_dir)
    entry = {
        "backend": backend,
        "step": steps[0] if steps else None,
        "steps": steps,
        "roles": [role] if role else list(selected_roles),
        "region": context_field(ctx, "region"),
        "capture": capture.capture_id if capture else None,
        "mode": mode,
        "iterations": list(iterations) if iterations else None,
        "world_size": world_size,
        "path": shown,
        "size": 0 if extra.get("state") == WRITING else path_size(path),  # not on disk yet: no stat on the step
        "kind": kind,
        "outside_output_dir": not within,
        **extra,
    }
    if "step" in extra and "steps" not in extra:
        entry["steps"] = [] if extra["step"] is None else [extra["step"]]  # a backend naming its own step
    return entry


def note_records(backend: str, hook: str, ctx: Any, selected_roles: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """The ``warning`` and ``skip`` records of what a backend said during one call (``ctx.warn``,
    ``ctx.skip``), tied to the call's step, capture and region like its artifacts."""
    capture = ctx.capture
    step = getattr(ctx, "step", None)
    role = getattr(ctx, "role", None)
    where = {"step": step if step is not None else (capture.steps[0] if capture else None),
             "steps": list(capture.steps) if capture else ([step] if step is not None else []),
             "roles": [role] if role else list(selected_roles), "region": getattr(ctx, "region", None),
             "capture": capture.capture_id if capture else None}
    records = []
    for record_type, text in ctx._notes or ():
        if record_type == "warning":
            records.append(("warning", {"kind": "backend", "backend": backend, "hook": hook, "message": text, **where}))
        else:
            records.append(("skip", {"backend": backend, "hook": hook, "reason": text, **where}))
    return records


def _in_run(path: os.PathLike | str, run_dir: Path) -> tuple[str, bool]:
    """``path`` as an artifact record names it (relative to the run directory) and whether it lies
    under the run directory. Lexical, no file-system calls: this runs for every artifact. A relative
    ``path`` is taken from the working directory, as the backend meant it."""
    text, root = os.path.abspath(path), os.path.abspath(run_dir)
    if text.startswith(root + os.sep):
        return text[len(root) + 1:], True
    return relative(text, run_dir), text == root


WRITING, WRITTEN = "writing", "written"
"""The ``state`` of an artifact record: listed when its file began to be written in the background,
and again once it is complete (or ``"failed"``)."""


def settled_artifacts(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Artifact records as readers use them: the ``writing`` record of a file and the record that settles
    it (``written`` or ``failed``, same file, same process) become one, where the first of the two was:
    the ``writing`` record's fields with the other's ``state``, ``size``, ``sha256``, ``error`` and
    ``time``. (The settling record usually comes later, but not always: a backend released after a
    failing hook is finalized before the failing call's records are written.) Any other record is
    kept as it is, in order (a file listed twice without a state is still listed twice), records of
    other types too (:func:`read_records` settles each manifest's records this way)."""
    settled: list[dict[str, Any]] = []
    unpaired: dict[tuple[Any, ...], tuple[int, bool]] = {}
    """file -> (index in ``settled``, is it the writing record) of a record still waiting for its pair."""
    for record in records:
        state = record.get("state")
        if state is None or record.get("type", "artifact") != "artifact":
            settled.append(dict(record))
            continue
        key = (record.get("_manifest"), record.get("rank"), record.get("pid"), record.get("path"))
        writing = state == WRITING
        waiting = unpaired.get(key)
        if waiting is None or waiting[1] == writing:
            unpaired[key] = (len(settled), writing)
            settled.append(dict(record))
            continue
        del unpaired[key]
        index = waiting[0]
        first, final = (settled[index], record) if not writing else (dict(record), settled[index])
        first.update({k: final[k] for k in ("state", "size", "sha256", "error", "time") if k in final})
        settled[index] = first
    return settled


def manifest_files(paths: Iterable[os.PathLike | str]) -> list[Path]:
    """Every process manifest under the given save paths (or run directories), sorted."""
    found: set[Path] = set()
    for base in paths:
        base = Path(base)
        if base.is_file() and base.suffix == ".jsonl":
            found.add(base)
            continue
        found.update(p for p in base.rglob("manifest/*.jsonl"))
    return sorted(found)


def read_records(paths: Iterable[os.PathLike | str]) -> Iterator[dict[str, Any]]:
    """All records of all manifests under ``paths``; each gets ``_manifest`` and ``_run_dir``. The two
    artifact records of a file written in the background come as one (:func:`settled_artifacts`): a
    ``writing`` record read alone is a file that was never finished."""
    for file in manifest_files(paths):
        run_dir = file.parent.parent
        records, background = [], False
        with open(file, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed process
                record["_manifest"] = str(file)
                record["_run_dir"] = str(run_dir)
                records.append(record)
                background = background or "state" in record
        yield from settled_artifacts(records) if background else records


def artifacts(paths: Iterable[os.PathLike | str]) -> list[dict[str, Any]]:
    """The artifact records under ``paths`` (settled, as :func:`read_records` gives them)."""
    return [r for r in read_records(paths) if r.get("type") == "artifact"]


def record_relocation(pending: dict[str, Any], target: Path, source: Path) -> bool:
    """Append, to the manifest that listed the ``pending`` artifact (a record from :func:`read_records`),
    the artifact record of the file now moved to ``target`` from ``source`` (nsys reports relocated
    after the process ended). Keeps what the pending record said the file belongs to."""
    run_dir = Path(pending["_run_dir"])
    common = {k: pending.get(k) for k in ("run", "rank", "host", "pid")}
    kept = {k: v for k, v in pending.items()
            if k not in common and k not in ("type", "time", "_manifest", "_run_dir", "path", "size", "kind", "reason",
                                             "source", "relocate_to", "outside_output_dir")}
    writer = ManifestWriter(Path(pending["_manifest"]), common, root=run_dir)
    try:
        return writer.write("artifact", **kept, path=relative(target, run_dir), size=path_size(target), kind="file",
                            relocated_from=str(source), outside_output_dir=False)
    finally:
        writer.close()


# --------------------------------------------------------------------------- typed records


@dataclass(kw_only=True)
class ProcessRecord:
    """The ``process`` record: what one Profiler that will profile is set to do, written when it joins its
    process session (colocated Profilers of one process each write one into the shared file). Read back
    by the report as :class:`rlprof.analysis.runs.Process` (this record, plus where it was read), so a
    field added here is written, read and shown in ``rlprof report --json`` without another edit."""

    TYPE: ClassVar[str] = "process"
    world_size: int | None = None
    """The run's ranks (a replica's process: the replicas)."""
    roles: list[str] = field(default_factory=list)
    """The roles the process hosts, selected or not (readers take the union over a process's records)."""
    selected_roles: list[str] = field(default_factory=list)
    """Those it profiles on this rank."""
    steps: list[int] = field(default_factory=list)
    """The profiled steps (``global_profiler.steps`` as the plan resolved them)."""
    mode: str = "?"
    """``e2e`` or ``discrete``."""
    tools: list[str] = field(default_factory=list)
    """The backends, in ``global_profiler.tool`` order."""
    save_path: str | None = None
    replica_rank: int | None = None
    """The rollout replica it is (agent-loop mode), else None."""
    expected_captures: int | None = None
    """How many capture windows the plan expects each backend to write here; None when it cannot know."""
    schedules: dict[str, dict[str, int]] = field(default_factory=dict)
    """Role -> its sampling schedule (``profiler.schedule``), for the sampled roles."""
    environment: dict[str, list[str]] = field(default_factory=dict)
    """Backend -> what it said it lacks on that machine (``check_environment``): such a backend is expected
    to write nothing."""
    global_profiler: dict[str, Any] = field(default_factory=dict)
    """The ``global_profiler`` keys declared ``recorded`` (:func:`rlprof.config.fields.key`), by their YAML
    names: a key declared so is recorded here, and read back, without another edit."""


@dataclass(kw_only=True)
class CaptureRecord:
    """The ``capture`` record: one per capture as it closes, written with the step's timing records;
    :mod:`rlprof.runtime.budget` counts its bytes against the budgets and the report lists its size."""

    TYPE: ClassVar[str] = "capture"
    capture: str
    """The capture's id (``step3``, ``step3.actor_update``)."""
    step: int | None = None
    steps: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    region: str | None = None
    """The region it was opened for (discrete mode), else None."""
    bytes: int
    """What its artifacts measured as it closed (files written in the background may not be whole yet)."""
    reason: str = "planned"
    """Why it was made: ``planned`` (``global_profiler.steps``, or the caller's own steps), ``requested: <id>``
    (``rlprof capture``, the request's id) or ``triggered: <sentence>`` (a trigger of ``global_profiler.trigger``,
    the sentence saying what fired it: ``triggered: step 812 took 2.3x the median of steps 792-811``)."""


@dataclass(kw_only=True)
class StalenessRecord:
    """The ``staleness`` record: how many parameter versions behind the trainer's weights the samples one step
    of an asynchronous run (verl's fully async policy, ``rlprof demo --async``) trained on were. The trainer
    of step N holds version N - 1, so a sample generated with version w is N - 1 - w behind. Written by the
    driver (``rank`` None) on every step, profiled or not; :mod:`rlprof.analysis.overlap` reads it."""

    TYPE: ClassVar[str] = "staleness"
    step: int
    """The step, which makes parameter version ``step``."""
    samples: int = 0
    min: int | None = None
    mean: float | None = None
    max: int | None = None
    source: str | None = None
    """Who recorded it (``rlprof demo --async``, verl's trainer)."""

    @classmethod
    def of(cls, step: int, behind: list[int], source: str) -> "StalenessRecord":
        """The record of step ``step`` whose samples were ``behind`` versions behind each."""
        return cls(step=step, samples=len(behind), min=min(behind, default=None), max=max(behind, default=None),
                   mean=round(sum(behind) / len(behind), 6) if behind else None, source=source)


STALENESS_RECORD = StalenessRecord.TYPE


@dataclass(kw_only=True)
class FrameworkIdleRecord:
    """The ``framework_idle`` record: an idle figure the training framework logs itself for one parameter
    version of an async run (verl's ``fully_async/rollouter/idle_ratio`` and ``fully_async/trainer/idle_ratio``),
    written by the drop-in where the framework logs it, so that the report sets rlprof's own figure beside it
    (:mod:`rlprof.analysis.overlap`). ``rank`` None (the driver's)."""

    TYPE: ClassVar[str] = "framework_idle"
    step: int
    """The parameter version whose window the figure describes (not the step the framework logged it at)."""
    side: str
    """``rollouter`` (generation) or ``trainer``."""
    idle_ratio: float
    window_s: float | None = None
    """The framework's own window for the ratio (verl: the rollouter's ``version_time``; the trainer's ``timing_s/step``)."""
    metric: str
    """The framework's metric name."""


FRAMEWORK_IDLE_RECORD = FrameworkIdleRecord.TYPE


@dataclass(kw_only=True)
class PhaseRecord:
    """The ``phase`` record: a phase of the training driver's own step, as the driver times it (verl's trainer:
    its ``timing_s/*``, ``gen``, ``reward``, ``adv``, ``update_actor``...). Written by the driver
    (``manifest/driver-<host>-<pid>.jsonl``, ``rank`` None) for profiled steps only; the report names what
    "(outside regions)" holds with them."""

    TYPE: ClassVar[str] = "phase"
    step: int
    name: str
    source: str | None = None
    """Who timed it (``verl``)."""
    start_ns: int
    end_ns: int
    duration_ms: float | None = None


PHASE_RECORD = PhaseRecord.TYPE


@dataclass(kw_only=True)
class UnprofiledStepsRecord:
    """The ``unprofiled_steps`` record: steps a profiling process ran without profiling them (not selected, or
    left out by a budget), many per record, one item of each list per step. The report puts profiled steps
    beside them. A Ray controller writes them too (``rank`` None), timed from its ``start_step`` to its
    ``step_boundary``: its workers hear nothing of an unprofiled step."""

    TYPE: ClassVar[str] = "unprofiled_steps"
    steps: list[int]
    start_ns: list[int]
    end_ns: list[int]


@dataclass(kw_only=True)
class NodeRecord:
    """The ``node`` record: the first line of a manifest the Ray controller gathered from another node
    (:mod:`rlprof.integrations.nodes`)."""

    TYPE: ClassVar[str] = "node"
    node: str | None = None
    """The Ray node id."""
    node_run_dir: str
    """The worker's run directory on that node: the file's artifact paths are relative to it."""
    node_manifest: str | None = None


NODE_RECORD = NodeRecord.TYPE


@dataclass(kw_only=True)
class NodeLostRecord:
    """The ``node_lost`` record: the controller found a node dead."""

    TYPE: ClassVar[str] = "node_lost"
    node: str
    node_host: str | None = None
    workers: list[str] = field(default_factory=list)
    """The workers it held (their names)."""
    step: int | None = None
    """The last profiled step it completed."""


NODE_LOST_RECORD = NodeLostRecord.TYPE


Record = TypeVar("Record")


def record_fields(record: Any) -> dict[str, Any]:
    """A typed record's fields, as its manifest line holds them (``ManifestWriter.write(record.TYPE, **...)``)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def read_record(cls: type[Record], raw: dict[str, Any], **given: Any) -> Record:
    """``cls`` read from the manifest record ``raw``: each field from ``raw`` where it holds a value of the
    field's declared type (lists and mappings copied), else the field's default (a record written by an
    older rlprof, or edited by hand, never breaks a reader); ``given`` fields are set as given (what the
    reader knows besides the record, such as the file it came from).

    :raises ValueError: a field without a default is missing or of another type (see :func:`required`:
        readers check those first)."""
    hints = _hints(cls)
    values = {}
    for f in fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
            continue
        value = raw.get(f.name, MISSING)
        if value is not MISSING and _fits(hints[f.name], value):
            values[f.name] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
        elif f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"{cls.__name__}.{f.name}: got {value!r}; allowed: {hints[f.name]}")
    return cls(**values)


def required(cls: type) -> dict[str, type]:
    """The fields of a record type that have no default (a record without them is not used), with their types
    (a container's kind: ``list`` for ``list[int]``)."""
    hints = _hints(cls)
    return {f.name: typing.get_origin(hints[f.name]) or hints[f.name] for f in fields(cls)
            if f.default is MISSING and f.default_factory is MISSING}


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _fits(hint: Any, value: Any) -> bool:
    """``value`` is of the type ``hint`` (containers by their kind, not their items; ``bool`` is no ``int``)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(option, value) for option in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is not None:
        return isinstance(value, origin)
    if hint is float:
        return type(value) in (int, float)
    return type(value) is hint


def process_record(prof: Any, environment: dict[str, list[str]]) -> ProcessRecord:
    """The ``process`` record of one Profiler (a participant of the process session)."""
    from dataclasses import asdict

    plan, run = prof.plan, prof.run
    return ProcessRecord(
        world_size=run.world_size, roles=list(run.roles), selected_roles=list(plan.selected_roles),
        steps=list(plan.steps), mode="discrete" if plan.discrete else "e2e", tools=list(plan.tools),
        save_path=str(run.run_dir.parent), replica_rank=run.replica_rank,
        expected_captures=plan.expected_captures(prof.stages),
        schedules={n: asdict(p.schedule) for n, p in plan.roles.items() if p.schedule},
        environment=environment, global_profiler=prof.config.recorded(),
    )


def cleanup_fields(backend: str, closed: list[str], finalized: bool, problems: list[str]) -> dict[str, Any]:
    """The ``cleanup`` record of a backend the core released after it raised."""
    return {"backend": backend, "closed": closed, "finalized": finalized, "errors": problems}
