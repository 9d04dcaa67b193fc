"""A run as the manifests describe it: its processes, the files its backends wrote (each once), its
step anatomy, and what its plan expected but did not get. :func:`build_reports` reads every record
once and never opens a trace; ``rlprof report``, ``report --html``, ``compare`` and the verdict all
start from the :class:`RunReport` it returns.

Records missing a field the report needs, or holding the wrong type, are left out (:func:`usable`):
a manifest edited by hand or cut short by a killed process never breaks a report.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlprof.analysis.anatomy import STRAGGLER_PCT, Anatomy, process_name, process_order, step_anatomy, timing_record
from rlprof.analysis.cost import ProfilingCost, is_wait, profiling_cost
from rlprof.analysis.overlap import ASYNC_REGIONS, Overlap, overlap_of
from rlprof.analysis.step_series import StepSeries, step_series
from rlprof.roles import ROLES
from rlprof.manifest import (FAILURE_RECORD, FRAMEWORK_IDLE_RECORD, GATHERED_RECORD, NODE_LOST_RECORD, NODE_RECORD,
                             PHASE_RECORD, STALENESS_RECORD, WRITING, WRITTEN, CaptureRecord, FrameworkIdleRecord,
                             ProcessRecord, StalenessRecord, read_record, read_records, record_fields, required,
                             settled_artifacts)


@dataclass(kw_only=True)
class Process(ProcessRecord):
    """One profiling process of the run: its ``process`` record(s) (:class:`~rlprof.manifest.ProcessRecord`,
    every field of it) and where it was read. A process hosting colocated roles may write one per
    participant; the roles, steps and tools are their union. A rollout replica's process (agent-loop
    mode) has ``replica_rank`` set and is named ``replica N``."""

    manifest: str
    rank: int
    host: str
    pid: int
    finalized: str | None = None
    """The ``finalized`` record's reason, or None when the process never wrote one."""
    node: str | None = None
    """The Ray node it ran on, when the controller gathered its manifest from that node."""

    @property
    def name(self) -> str:
        """``rank 3`` or ``replica 0`` (see :func:`rlprof.analysis.anatomy.process_name`)."""
        return process_name(self.rank, self.replica_rank)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.host} pid {self.pid})"

    def join(self, record: dict[str, Any]) -> None:
        """Add another participant's ``process`` record (colocated roles of the same process)."""
        for name in ("roles", "selected_roles", "tools"):
            current = getattr(self, name)
            current.extend(x for x in record.get(name, []) if x not in current)
        self.steps = sorted(set(self.steps) | set(record.get("steps", [])))
        if record.get("expected_captures") is not None:
            self.expected_captures = max(self.expected_captures or 0, record["expected_captures"])
        for backend, problems in (record.get("environment") or {}).items():
            self.environment.setdefault(backend, list(problems))


@dataclass
class File:
    """One file or directory a backend wrote, however many roles or steps it holds."""

    path: str
    """Absolute (run directory + the manifest's relative path)."""
    size: int
    backend: str
    rank: int
    host: str
    pid: int
    capture: str | None
    steps: list[int]
    roles: list[str]
    region: str | None
    exists: bool
    """False when the file is no longer there (moved away, e.g. uploaded by a finish hook)."""
    replica_rank: int | None = None
    """Set when a rollout replica's process wrote it."""
    details: list[str] = field(default_factory=list)
    """Lines from the backend's ``report_details`` hook (filled by :func:`add_details`)."""
    node: str | None = None
    """The Ray node that wrote it (a manifest the controller gathered); ``path`` is on that node unless
    ``gathered_from`` is set."""
    gathered_from: str | None = None
    """Where it was on its node before ``gather: traces`` moved it to ``path`` (checksum verified)."""


@dataclass
class Cell:
    """What one backend produced for one step x role on one process, and the role's region times."""

    step: int | None
    role: str
    rank: int
    host: str
    pid: int
    backend: str
    captures: list[str] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)
    """Absolute path -> size in bytes (a file holding several roles is listed in each role's cell)."""
    iterations: dict[str, list[list[int]]] = field(default_factory=dict)
    """Region -> the sampled iteration spans ``[first, last]`` its captures hold (sampled roles only)."""
    ranges: dict[str, dict[str, float]] = field(default_factory=dict)
    """Region -> ``{"ms": total, "count": n}`` from the manifest's ``region`` records."""
    replica_rank: int | None = None


@dataclass
class RunReport:
    run_id: str
    run_dirs: list[str]
    processes: list[Process]
    files: list[File]
    cells: list[Cell]
    anatomy: Anatomy
    missing: list[dict[str, Any]]
    short_captures: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    worker_failures: list[dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """Captures a backend said it skipped, with its reason (``skip`` records): explained, not missing."""
    warnings: list[dict[str, Any]] = field(default_factory=list)
    """``warning`` records: a backend's ``ctx.warn`` (kind ``backend``), a disagreeing colocated Profiler
    (kind ``colocated``). Said, never a failure."""
    nodes_lost: list[dict[str, Any]] = field(default_factory=list)
    """Ray nodes the controller found dead (``node_lost`` records): node, node_host, workers, step."""
    not_gathered: list[dict[str, Any]] = field(default_factory=list)
    """``gather: traces`` files left on their node (``failed``, ``over_budget``): node, source, status."""
    inside: Any = None
    """What the run's traces say inside each region, an :class:`rlprof.analysis.inside.Inside` (which
    imports this module, hence ``Any``) set by :func:`rlprof.analysis.inside.add_inside`; None until
    asked, or when no trace of the run is on this disk."""
    unwritten: list[dict[str, Any]] = field(default_factory=list)
    """Files a backend began to write in the background and never finished (``state`` ``writing`` with
    no file at its path: the process was killed mid-export, or finalize stopped waiting), or failed to
    write (``failed``, with the ``error``): rank, host, pid, backend, capture, steps, path, state, error."""
    cost: ProfilingCost | None = None
    """What profiling cost each profiled step, beside the unprofiled steps (:mod:`rlprof.analysis.cost`)."""
    captures: list[dict[str, Any]] = field(default_factory=list)
    """Each capture's size as it closed (``capture`` records): rank, capture, step, roles, region, bytes."""
    overlap: Overlap | None = None
    """Per parameter version, who waited for whom, where rollout and training overlap (an async run:
    :mod:`rlprof.analysis.overlap`); None for a run without its regions."""
    series: StepSeries = field(default_factory=StepSeries)
    """Step time over every step of the run, its captures marked (:mod:`rlprof.analysis.step_series`)."""
    compute: Any = None
    """What the compute achieved (:class:`rlprof.analysis.compute.Compute`, set by ``add_compute``); None until asked."""

    @property
    def budget_skipped(self) -> list[dict[str, Any]]:
        """The skips a budget decided (the core's, one per backend: each step x roles once here)."""
        seen = {}
        for s in self.skipped:
            if s.get("by") == "budget":
                seen.setdefault((s["rank"], s.get("host"), s.get("pid"), tuple(s.get("steps") or ()), tuple(s.get("roles") or ())), s)
        return list(seen.values())

    @property
    def unavailable(self) -> list[dict[str, Any]]:
        """Backends that said at start they cannot capture on that machine (and so wrote nothing)."""
        return [{"rank": p.rank, "replica_rank": p.replica_rank, "name": p.name, "host": p.host, "pid": p.pid, "backend": b,
                 "problems": problems}
                for p in self.processes for b, problems in sorted(p.environment.items())]

    @property
    def unfinalized(self) -> list[Process]:
        return [p for p in self.processes if p.finalized is None]

    @property
    def captured_nothing(self) -> bool:
        return bool(self.processes) and not self.files

    @property
    def problem_count(self) -> int:
        return (len(self.missing) + len(self.short_captures) + len(self.errors) + len(self.worker_failures)
                + len(self.unfinalized) + len(self.nodes_lost) + len(self.unwritten) + (1 if self.captured_nothing else 0))

    @property
    def ok(self) -> bool:
        return self.problem_count == 0

    @property
    def total_size(self) -> int:
        return sum(f.size for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "ok": self.ok,
            "run_dirs": self.run_dirs,
            "modes": sorted({p.mode for p in self.processes}),
            "tools": sorted({t for p in self.processes for t in p.tools}),
            "processes": [{**asdict(p), "name": p.name} for p in self.processes],
            **self.anatomy.as_dict(),
            "files": [asdict(f) for f in self.files],
            "total_size": self.total_size,
            "rows": [{**asdict(c), "size": sum(c.files.values())} for c in self.cells],
            "missing": self.missing,
            "short_captures": self.short_captures,
            "unfinalized": [asdict(p) for p in self.unfinalized],
            "unavailable": self.unavailable,
            "errors": self.errors,
            "worker_failures": self.worker_failures,
            "skipped": self.skipped,
            "warnings": self.warnings,
            "nodes_lost": self.nodes_lost,
            "not_gathered": self.not_gathered,
            "inside": None if self.inside is None else self.inside.as_dict(),
            "unwritten": self.unwritten,
            "captures": self.captures,
            "profiling_cost": self.cost.as_dict() if self.cost is not None else None,
            "budget_skipped": self.budget_skipped,
            "overlap": self.overlap.as_dict() if self.overlap is not None else None,
            "step_series": self.series.as_dict(),
            "compute": self.compute.as_dict() if self.compute is not None else None,
        }


# ----------------------------------------------------------------------------------- building


def build_reports(paths: Iterable[str | Path], run: str | None = None, straggler_pct: float = STRAGGLER_PCT) -> list[RunReport]:
    """Reports for every run found under ``paths``, newest first, or only the one named ``run``
    (its id or a unique prefix of it).

    :raises LookupError: ``run`` matches no run, or several.
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in without_copies(read_records(paths)):
        by_run.setdefault(str(record.get("run")), []).append(record)
    if run is not None:
        chosen = [r for r in by_run if r == run] or [r for r in by_run if r.startswith(run)]
        if len(chosen) != 1:
            found = ", ".join(sorted(by_run, reverse=True)) or "none"
            raise LookupError(f"--run {run!r} matches {len(chosen) or 'no'} runs; runs found: {found}")
    else:
        chosen = list(by_run)
    return [build_report(run_id, by_run[run_id], straggler_pct) for run_id in sorted(chosen, reverse=True)]  # ids sort by start time


def without_copies(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records, less those of a manifest the controller gathered from a node (headed by a ``node``
    record) when that node's own manifest was read too (``rlprof report CONTROLLER NODE_A ...``): each
    process is counted once, from its node's file."""
    records = list(records)
    read = {r.get("_manifest") for r in records}
    copies = {r["_manifest"] for r in records if r.get("type") == NODE_RECORD
              and r.get("node_manifest") in read and r.get("node_manifest") != r["_manifest"]}
    return [r for r in records if r.get("_manifest") not in copies] if copies else records


WHO = {"rank": int, "host": str, "pid": int}
"""The common fields of a process's records (the writer's), as a report needs them."""
REQUIRED = {
    ProcessRecord.TYPE: {**WHO, **required(ProcessRecord)},
    "artifact": {"rank": int, "host": str, "pid": int, "backend": str, "path": str},
    "finalized": {},
    "error": {},
    "skip": {"rank": int, "backend": str, "reason": str},
    CaptureRecord.TYPE: {"rank": int, **required(CaptureRecord)},
    "unprofiled_steps": {"steps": list, "start_ns": list, "end_ns": list},  # rank None: the Ray controller's
    "warning": {"rank": int, "message": str},
    FAILURE_RECORD: {},
    NODE_RECORD: {"node_run_dir": str},
    NODE_LOST_RECORD: {"node": str},
    GATHERED_RECORD: {"source": str, "path": str, "status": str},
    PHASE_RECORD: {"step": int, "name": str, "start_ns": int, "end_ns": int},
    STALENESS_RECORD: required(StalenessRecord),
    FRAMEWORK_IDLE_RECORD: required(FrameworkIdleRecord),
}
"""The fields (and their types) a record needs to be used; others are ignored (see :func:`usable`)."""


def _capture_sizes(captures: Sequence[dict[str, Any]], artifacts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each capture as its ``capture`` record gives it, with ``bytes`` what its files hold on disk now (their
    settled sizes: a trace written in the background was not on disk yet as its capture closed; what was
    counted then stays as ``bytes_at_close``)."""
    on_disk: dict[tuple, int] = {}
    for a in artifacts:
        key = (a.get("rank"), a.get("host"), a.get("pid"), a.get("capture"))
        on_disk[key] = on_disk.get(key, 0) + (a.get("size") or 0)
    sized = []
    for r in captures:
        row = {**_plain(r, "rank", "host", "pid"), **record_fields(read_record(CaptureRecord, r))}
        row["bytes_at_close"] = row["bytes"]
        row["bytes"] = on_disk.get((r["rank"], r.get("host"), r.get("pid"), r["capture"]), row["bytes"])
        sized.append(row)
    return sized


def usable(record: dict[str, Any]) -> bool:
    """A record the report can use: a known type with its required fields (a manifest edited by hand
    or cut short must not break the report), or a timing record the anatomy accepts."""
    kind = record.get("type")
    if kind in ("step", "region"):
        return timing_record(record)
    if is_wait(kind):
        return type(record.get("step")) is int
    needed = REQUIRED.get(kind)
    return needed is not None and all(type(record.get(k)) is t for k, t in needed.items())


def build_report(run_id: str, records: Sequence[dict[str, Any]], straggler_pct: float = STRAGGLER_PCT) -> RunReport:
    """The report of one run from its manifest records (all nodes' together)."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    run_dirs: set[str] = set()
    for r in records:  # one pass: a large run has tens of thousands of records
        if usable(r):
            by_type.setdefault(r["type"], []).append(r)
            run_dirs.add(r["_run_dir"])
    heads = _locate(by_type)
    processes: dict[str, Process] = {}
    for r in by_type.get("process", []):
        if r["_manifest"] in processes:
            processes[r["_manifest"]].join(r)
            continue
        processes[r["_manifest"]] = read_record(Process, r, manifest=r["_manifest"],
                                                node=heads[r["_manifest"]].get("node") if r["_manifest"] in heads else None)
    for r in by_type.get("finalized", []):
        if r["_manifest"] in processes:
            processes[r["_manifest"]].finalized = r.get("reason", "end")
    artifacts, unwritten = _settled(by_type.get("artifact", []))
    regions, skips = by_type.get("region", []), by_type.get("skip", [])
    ordered = sorted(processes.values(), key=lambda p: (process_order(p.rank, p.replica_rank), p.host, p.pid))
    replicas = {p.manifest: p.replica_rank for p in ordered}
    cells = _cells(artifacts, regions, replicas)
    anatomy = step_anatomy(by_type.get("process", []) + by_type.get("step", []) + regions + by_type.get(PHASE_RECORD, []),
                           straggler_pct, checked=True)
    waits = [r for kind, rs in by_type.items() if is_wait(kind) for r in rs]
    cost = profiling_cost([*by_type.get("step", []), *regions, *by_type.get("unprofiled_steps", []), *waits,
                           *by_type.get(PHASE_RECORD, [])],
                          background={p.manifest for p in ordered if p.replica_rank is not None})
    overlap = None
    if any(r["region"] in ASYNC_REGIONS for r in regions):
        overlap = overlap_of([*by_type.get("process", []), *by_type.get("step", []), *regions,
                              *by_type.get(STALENESS_RECORD, []), *by_type.get(FRAMEWORK_IDLE_RECORD, []),
                              *by_type.get("unprofiled_steps", [])])
    return RunReport(
        run_id=run_id,
        overlap=overlap,
        run_dirs=sorted(run_dirs),
        processes=ordered,
        files=_files(artifacts, replicas),
        cells=sorted(cells.values(), key=_row_order),
        anatomy=anatomy,
        cost=cost,
        missing=_missing(ordered, cells, skips + unwritten),
        short_captures=_short_captures(ordered, artifacts + skips),
        errors=[_plain(r, "rank", "host", "pid", "backend", "hook", "error", "kind") for r in by_type.get("error", [])],
        worker_failures=[_plain(r, "worker", "worker_rank", "call", "step", "kind", "error") for r in by_type.get(FAILURE_RECORD, [])],
        skipped=[_plain(r, "rank", "host", "pid", "backend", "capture", "steps", "roles", "region", "reason", "by", "budget",
                        "limit_bytes", "measured_bytes") for r in skips],
        captures=_capture_sizes(by_type.get("capture", []), artifacts),
        series=step_series(run_dirs, by_type.get("capture", []), [s.step for s in anatomy.steps], role_index),
        warnings=[_plain(r, "rank", "host", "pid", "kind", "backend", "key", "message", "step", "capture")
                  for r in by_type.get("warning", [])],
        nodes_lost=[_plain(r, "node", "node_host", "workers", "step") for r in by_type.get(NODE_LOST_RECORD, [])],
        not_gathered=[_plain(r, "node", "source", "size", "status", "error") for r in by_type.get(GATHERED_RECORD, [])
                      if r["status"] not in ("verified", "exists")],
        unwritten=[_plain(r, "rank", "host", "pid", "backend", "capture", "steps", "path", "state", "error") for r in unwritten],
    )


def locate(records: Sequence[dict[str, Any]]) -> None:
    """:func:`_locate` for a run's records as :func:`rlprof.manifest.read_records` gives them (``rlprof
    timeline`` reads the traces where the report says they are)."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("type") in ("artifact", NODE_RECORD, GATHERED_RECORD) and usable(r):
            by_type.setdefault(r["type"], []).append(r)
    _locate(by_type)


def _settled(artifacts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The files as they are, and those that never were written.

    Records written in the background come in pairs (:func:`rlprof.manifest.settled_artifacts`); a
    ``writing`` record left alone is a file the process did not finish: if it is at its path after all
    (placed after the last record, e.g. after finalize stopped waiting: a file appears under its final
    name only whole) it counts, with its size on disk, else it is unwritten, as is a ``failed`` one.
    ``pending`` records that were moved since (a later record says ``relocated_from`` their ``source``:
    nsys reports written at exit, then relocated) are dropped."""
    records, unwritten = [], []
    for a in settled_artifacts(artifacts):
        state = a.get("state")
        if state == WRITING and os.path.isfile(os.path.join(a["_run_dir"], a["path"])):
            a.update(state=WRITTEN, size=os.path.getsize(os.path.join(a["_run_dir"], a["path"])))
        elif state is not None and state != WRITTEN:
            unwritten.append(a)
            continue
        records.append(a)
    moved = {a["relocated_from"] for a in records if a.get("relocated_from")}
    if moved:
        records = [a for a in records if not (a.get("kind") == "pending" and a.get("source") in moved)]
    return records, unwritten


def _locate(by_type: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Point each artifact record at where its file is: a manifest the controller gathered from another
    node (headed by a ``node`` record) lists files on that node (``_run_dir`` becomes the node's run
    directory, ``_node`` its id), unless ``gather: traces`` moved the file here (a ``verified``
    ``gathered`` record for it, or for every file under a directory artifact): then ``_run_dir`` is
    the controller's and ``_gathered_from`` the node path. Returns the ``node`` records by manifest."""
    heads = {r["_manifest"]: r for r in by_type.get(NODE_RECORD, [])}
    if not heads:
        return heads
    moves = {g["source"]: g for g in by_type.get(GATHERED_RECORD, [])}  # the last word on each file
    sources = sorted(moves)
    for a in by_type.get("artifact", []):
        head = heads.get(a["_manifest"])
        if head is None:
            continue
        a["_node"] = head.get("node")
        source = os.path.join(head["node_run_dir"], a["path"])
        under = [moves[source]] if source in moves else _under(sources, source + os.sep, moves)
        if under and all(g["status"] in ("verified", "exists") for g in under):
            a["_gathered_from"] = source
            a["_run_dir"] = under[0]["_run_dir"]
        else:
            a["_run_dir"] = head["node_run_dir"]
    return heads


def _under(sources: list[str], prefix: str, moves: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``gathered`` records of files under a directory (``sources`` sorted: a bisect, not a scan)."""
    found = []
    for i in range(bisect.bisect_left(sources, prefix), len(sources)):
        if not sources[i].startswith(prefix):
            break
        found.append(moves[sources[i]])
    return found


def _files(artifacts: list[dict[str, Any]], replicas: dict[str, int | None]) -> list[File]:
    """Each file once, whatever number of roles or steps its artifact records name. Only its
    existence is checked (one ``lstat``); it is never read. ``replicas``: manifest -> its process's ``replica_rank``."""
    files: dict[str, File] = {}
    for a in artifacts:
        path = os.path.join(a["_run_dir"], a["path"])
        known = files.get(path)
        if known is None:
            files[path] = File(path=path, size=int(a.get("size") or 0), backend=a["backend"], rank=a["rank"], host=a["host"],
                               pid=a["pid"], capture=a.get("capture"), steps=list(a.get("steps") or []),
                               roles=list(a.get("roles") or []), region=a.get("region"), exists=os.path.lexists(path),
                               replica_rank=replicas.get(a["_manifest"]), node=a.get("_node"),
                               gathered_from=a.get("_gathered_from"))
            continue
        known.size = max(known.size, int(a.get("size") or 0))
        known.steps += [s for s in a.get("steps") or [] if s not in known.steps]
        known.roles += [r for r in a.get("roles") or [] if r not in known.roles]
    return sorted(files.values(), key=lambda f: (min(f.steps, default=-1), f.capture or "", process_order(f.rank, f.replica_rank),
                                                 f.host, f.pid, f.backend, f.path))


def _cells(artifacts: list[dict[str, Any]], regions: list[dict[str, Any]], replicas: dict[str, int | None]) -> dict[tuple, Cell]:
    """Artifacts grouped by (step, role, process, backend), with the role's region times."""
    times: dict[tuple, dict[str, dict[str, float]]] = {}
    for r in regions:
        entry = times.setdefault((r["step"], r.get("role"), r["_manifest"]), {}).setdefault(r["region"], {"ms": 0.0, "count": 0})
        entry["ms"] = round(entry["ms"] + float(r["duration_ms"]), 6)
        entry["count"] += 1
    cells: dict[tuple, Cell] = {}
    for a in artifacts:
        path = os.path.join(a["_run_dir"], a["path"])
        for step in a.get("steps") or [None]:
            for role in a.get("roles") or []:
                key = (step, role, a["_manifest"], a["backend"])
                cell = cells.get(key)
                if cell is None:
                    cell = cells[key] = Cell(step=step, role=role, rank=a["rank"], host=a["host"], pid=a["pid"], backend=a["backend"],
                                             replica_rank=replicas.get(a["_manifest"]))
                    cell.ranges = times.get((step, role, a["_manifest"]), {})  # shared, read-only
                if a.get("capture") and a["capture"] not in cell.captures:
                    cell.captures.append(a["capture"])
                cell.files[path] = a.get("size", 0)
                if a.get("iterations"):
                    cell.iterations.setdefault(a.get("region") or role, []).append(list(a["iterations"]))
    return cells


def _missing(processes: list[Process], cells: dict[tuple, Cell], skips: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Selected step x role x backend combinations for which a process wrote nothing and said no reason
    (a ``skip`` record explains its steps x roles). An artifact not tied to a step (written at finalize,
    e.g. relocated nsys reports) covers every step."""
    explained = {(step, role, r["_manifest"], r.get("backend")) for r in skips
                 for step in r.get("steps") or [None] for role in r.get("roles") or []}
    cells = {**dict.fromkeys(explained), **cells}
    missing = []
    for p in processes:
        for backend in p.tools:
            if backend in p.environment:
                continue  # it said up front it cannot capture here: reported as unavailable, not missing
            for role in p.selected_roles:
                for step in p.steps:
                    if (step, role, p.manifest, backend) not in cells and (None, role, p.manifest, backend) not in cells:
                        missing.append({"rank": p.rank, "replica_rank": p.replica_rank, "name": p.name, "host": p.host, "pid": p.pid, "backend": backend,
                                        "step": step, "role": role, "manifest": p.manifest})
    return missing


def _short_captures(processes: list[Process], artifacts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Processes whose backend wrote fewer capture windows than the plan expected (checked only for
    backends that tie their files to captures at all); a capture it skipped with a reason counts."""
    seen: dict[tuple[str, str], set[str]] = {}
    budgeted = {(a["_manifest"], a["backend"]) for a in artifacts if a.get("type") == "skip" and a.get("by") == "budget"}
    for a in artifacts:
        if a.get("capture"):
            seen.setdefault((a["_manifest"], a["backend"]), set()).add(a["capture"])
    short = []
    for p in processes:
        for backend in p.tools:
            got = seen.get((p.manifest, backend))
            if (p.manifest, backend) in budgeted:
                continue  # a budget left captures out, each with a skip record: explained, not short
            if got is not None and p.expected_captures is not None and len(got) < p.expected_captures:
                short.append({"rank": p.rank, "replica_rank": p.replica_rank, "name": p.name, "host": p.host, "pid": p.pid, "backend": backend,
                              "captures": len(got), "expected": p.expected_captures})
    return short


def _plain(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: record.get(k) for k in keys}


def _row_order(cell: Cell) -> tuple:
    return (cell.step if cell.step is not None else -1, role_index(cell.role), process_order(cell.rank, cell.replica_rank),
            cell.host, cell.pid, cell.backend)


def role_index(role: str) -> int:
    """Canonical role order (actor, rollout, ref, critic, reward), unknown roles last."""
    return ROLES.index(role) if role in ROLES else len(ROLES)


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

