"""A run's report built from its manifests: its processes, the files its backends wrote (each once), its
step anatomy, and what its plan expected but did not get. :func:`build_reports` reads every record
once and never opens a trace; ``rlprof report``, ``report --html``, ``compare`` and the verdict all
start from the :class:`~rlprof.analysis.run_report.RunReport` it returns (its types:
:mod:`rlprof.analysis.run_report`; which records it takes and where their files are:
:mod:`rlprof.analysis.run_records`).

Records missing a field the report needs, or holding the wrong type, are left out (:func:`usable`):
a manifest edited by hand or cut short by a killed process never breaks a report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlprof.analysis.anatomy import STRAGGLER_PCT, process_order, step_anatomy
from rlprof.analysis.cost import is_wait, profiling_cost
from rlprof.analysis.overlap import ASYNC_REGIONS, overlap_of
from rlprof.analysis.run_records import REQUIRED, WHO, files_of, place_files, settled, locate, usable  # noqa: F401  (re-exported)
from rlprof.analysis.run_report import Cell, File, Process, RunReport  # noqa: F401  (re-exported)
from rlprof.analysis.step_series import step_series
from rlprof.manifest import (FAILURE_RECORD, FRAMEWORK_IDLE_RECORD, GATHERED_RECORD, NODE_LOST_RECORD, NODE_RECORD, PHASE_RECORD,
                             STALENESS_RECORD, CaptureRecord, read_record, read_records, record_fields)
from rlprof.roles import ROLES


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


def build_report(run_id: str, records: Sequence[dict[str, Any]], straggler_pct: float = STRAGGLER_PCT) -> RunReport:
    """The report of one run from its manifest records (all nodes' together)."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    run_dirs: set[str] = set()
    for r in records:  # one pass: a large run has tens of thousands of records
        if usable(r):
            by_type.setdefault(r["type"], []).append(r)
            run_dirs.add(r["_run_dir"])
    heads = place_files(by_type)
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
    artifacts, unwritten = settled(by_type.get("artifact", []))
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
        files=files_of(artifacts, replicas),
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

