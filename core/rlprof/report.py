"""``rlprof report RUN [RUN ...] [--run ID] [--json] [--html -o FILE]``: what a run captured and where its steps' time went.

Use it after a run, on one machine or over every node's ``save_path`` at once (save paths are
node-local; each process wrote its own manifest, so directories copied from several nodes merge).
Everything comes from the manifests; no trace is opened, so a report takes the same time for 1 MB
or 1 TB of traces and still works after the traces were uploaded and removed. For each run, newest
first:

* the **step anatomy** (:mod:`rlprof.anatomy`): per profiled step its time across ranks and, per
  region, ``min_ms``/``median_ms``/``max_ms``, ``slowest_rank`` and ``share_of_step``; stragglers flagged;
* the **files** the backends wrote, each counted once (an end-to-end trace holding three roles is one
  file), and per-file details from the backend where it offers them (entry-point group
  ``rlprof.report_details``, e.g. rlprof-nsys' NVTX summary);
* the **verdict** (:func:`verdict`): what the plan expected but did not get — a step x role a
  backend wrote nothing for, fewer capture windows than planned, processes that never finalized,
  backend errors, workers the Ray controller lost — and, when nothing was captured at all, why.

Exit status: 0 every run is ok, 1 a run captured nothing or misses something, 2 no manifests / usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .anatomy import STRAGGLER_PCT, Anatomy, step_anatomy
from .config import ROLES
from .manifest import read_records
from .ray import FAILURE_RECORD

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
DETAILS_GROUP = "rlprof.report_details"
"""Entry-point group: ``<backend name> = module:function``, ``function(path) -> list[str]``."""
FILES_SHOWN = 24
"""The text report lists this many files, then counts the rest (``--json`` lists all)."""


@dataclass
class Process:
    """One profiling process of the run, from its ``process`` record(s): a process hosting
    colocated roles may write one per participant; the roles, steps and tools are their union."""

    manifest: str
    rank: int
    host: str
    pid: int
    roles: list[str]
    selected_roles: list[str]
    steps: list[int]
    mode: str
    tools: list[str]
    replica_rank: int | None
    expected_captures: int | None
    environment: dict[str, list[str]] = field(default_factory=dict)
    """Backend -> what it said it lacks on that machine; such a backend is expected to write nothing."""
    finalized: str | None = None
    """The ``finalized`` record's reason, or None when the process never wrote one."""

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.host} pid {self.pid})"

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
    details: list[str] = field(default_factory=list)
    """Lines from the backend's ``rlprof.report_details`` function (filled by :func:`add_details`)."""


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

    @property
    def unavailable(self) -> list[dict[str, Any]]:
        """Backends that said at start they cannot capture on that machine (and so wrote nothing)."""
        return [{"rank": p.rank, "host": p.host, "pid": p.pid, "backend": b, "problems": problems}
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
                + len(self.unfinalized) + (1 if self.captured_nothing else 0))

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
            "verdict": verdict_lines(self),
            "run_dirs": self.run_dirs,
            "modes": sorted({p.mode for p in self.processes}),
            "tools": sorted({t for p in self.processes for t in p.tools}),
            "processes": [asdict(p) for p in self.processes],
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
        }


# ----------------------------------------------------------------------------------- building


def build_reports(paths: Iterable[str | Path], run: str | None = None, straggler_pct: float = STRAGGLER_PCT) -> list[RunReport]:
    """Reports for every run found under ``paths``, newest first, or only the one named ``run``
    (its id or a unique prefix of it).

    :raises LookupError: ``run`` matches no run, or several.
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in read_records(paths):
        by_run.setdefault(str(record.get("run")), []).append(record)
    if run is not None:
        chosen = [r for r in by_run if r == run] or [r for r in by_run if r.startswith(run)]
        if len(chosen) != 1:
            found = ", ".join(sorted(by_run, reverse=True)) or "none"
            raise LookupError(f"--run {run!r} matches {len(chosen) or 'no'} runs; runs found: {found}")
    else:
        chosen = list(by_run)
    return [build_report(run_id, by_run[run_id], straggler_pct) for run_id in sorted(chosen, reverse=True)]  # ids sort by start time


def build_report(run_id: str, records: Sequence[dict[str, Any]], straggler_pct: float = STRAGGLER_PCT) -> RunReport:
    """The report of one run from its manifest records (all nodes' together)."""
    processes: dict[str, Process] = {}
    for r in records:
        if r["type"] != "process":
            continue
        if r["_manifest"] in processes:
            processes[r["_manifest"]].join(r)
            continue
        processes[r["_manifest"]] = Process(
            manifest=r["_manifest"], rank=r["rank"], host=r["host"], pid=r["pid"], roles=list(r.get("roles", [])),
            selected_roles=list(r.get("selected_roles", [])), steps=list(r.get("steps", [])), mode=r.get("mode", "?"),
            tools=list(r.get("tools", [])), replica_rank=r.get("replica_rank"), expected_captures=r.get("expected_captures"),
            environment={k: list(v) for k, v in (r.get("environment") or {}).items()},
        )
    for r in records:
        if r["type"] == "finalized" and r["_manifest"] in processes:
            processes[r["_manifest"]].finalized = r.get("reason", "end")
    artifacts = [r for r in records if r["type"] == "artifact"]
    cells = _cells(artifacts, [r for r in records if r["type"] == "region"])
    ordered = sorted(processes.values(), key=lambda p: (p.rank, p.host, p.pid))
    return RunReport(
        run_id=run_id,
        run_dirs=sorted({r["_run_dir"] for r in records}),
        processes=ordered,
        files=_files(artifacts),
        cells=sorted(cells.values(), key=_row_order),
        anatomy=step_anatomy(records, straggler_pct),
        missing=_missing(ordered, cells),
        short_captures=_short_captures(ordered, artifacts),
        errors=[_plain(r, "rank", "host", "pid", "backend", "hook", "error", "kind") for r in records if r["type"] == "error"],
        worker_failures=[_plain(r, "worker", "worker_rank", "call", "step", "kind", "error")
                         for r in records if r["type"] == FAILURE_RECORD],
    )


def _files(artifacts: list[dict[str, Any]]) -> list[File]:
    """Each file once, whatever number of roles or steps its artifact records name. Only its
    existence is checked (one ``lstat``); it is never read."""
    files: dict[str, File] = {}
    for a in artifacts:
        path = os.path.join(a["_run_dir"], a["path"])
        known = files.get(path)
        if known is None:
            files[path] = File(path=path, size=int(a.get("size") or 0), backend=a["backend"], rank=a["rank"], host=a["host"],
                               pid=a["pid"], capture=a.get("capture"), steps=list(a.get("steps") or []),
                               roles=list(a.get("roles") or []), region=a.get("region"), exists=os.path.lexists(path))
            continue
        known.size = max(known.size, int(a.get("size") or 0))
        known.steps += [s for s in a.get("steps") or [] if s not in known.steps]
        known.roles += [r for r in a.get("roles") or [] if r not in known.roles]
    return sorted(files.values(), key=lambda f: (min(f.steps, default=-1), f.capture or "", f.rank, f.host, f.pid, f.backend, f.path))


def _cells(artifacts: list[dict[str, Any]], regions: list[dict[str, Any]]) -> dict[tuple, Cell]:
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
                    cell = cells[key] = Cell(step=step, role=role, rank=a["rank"], host=a["host"], pid=a["pid"], backend=a["backend"])
                    cell.ranges = {name: dict(v) for name, v in times.get((step, role, a["_manifest"]), {}).items()}
                if a.get("capture") and a["capture"] not in cell.captures:
                    cell.captures.append(a["capture"])
                cell.files[path] = a.get("size", 0)
                if a.get("iterations"):
                    cell.iterations.setdefault(a.get("region") or role, []).append(list(a["iterations"]))
    return cells


def _missing(processes: list[Process], cells: dict[tuple, Cell]) -> list[dict[str, Any]]:
    """Selected step x role x backend combinations for which a process wrote nothing. An artifact
    not tied to a step (written at finalize, e.g. relocated nsys reports) covers every step."""
    missing = []
    for p in processes:
        for backend in p.tools:
            if backend in p.environment:
                continue  # it said up front it cannot capture here: reported as unavailable, not missing
            for role in p.selected_roles:
                for step in p.steps:
                    if (step, role, p.manifest, backend) not in cells and (None, role, p.manifest, backend) not in cells:
                        missing.append({"rank": p.rank, "host": p.host, "pid": p.pid, "backend": backend,
                                        "step": step, "role": role, "manifest": p.manifest})
    return missing


def _short_captures(processes: list[Process], artifacts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Processes whose backend wrote fewer capture windows than the plan expected (checked only for
    backends that tie their files to captures at all)."""
    seen: dict[tuple[str, str], set[str]] = {}
    for a in artifacts:
        if a.get("capture"):
            seen.setdefault((a["_manifest"], a["backend"]), set()).add(a["capture"])
    short = []
    for p in processes:
        for backend in p.tools:
            got = seen.get((p.manifest, backend))
            if got is not None and p.expected_captures is not None and len(got) < p.expected_captures:
                short.append({"rank": p.rank, "host": p.host, "pid": p.pid, "backend": backend,
                              "captures": len(got), "expected": p.expected_captures})
    return short


def _plain(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: record.get(k) for k in keys}


def _row_order(cell: Cell) -> tuple:
    return (cell.step if cell.step is not None else -1, role_index(cell.role), cell.rank, cell.host, cell.pid, cell.backend)


def role_index(role: str) -> int:
    """Canonical role order (actor, rollout, ref, critic, reward), unknown roles last."""
    return ROLES.index(role) if role in ROLES else len(ROLES)


# ----------------------------------------------------------------------------------- verdict


@dataclass
class Verdict:
    """Did the run capture what its plan expected? ``lines`` say so in plain sentences."""

    ok: bool
    lines: list[str]


def verdict(paths: Iterable[str | Path], run: str | None = None) -> Verdict:
    """The verdict over every run under ``paths`` (or the one named ``run``): ok only when each
    captured something and misses nothing its plan expected. No manifest at all is not ok."""
    paths = list(paths)
    reports = build_reports(paths, run=run)
    if not reports:
        return Verdict(False, [f"nothing was profiled: no rlprof manifest under {', '.join(map(str, paths))}"])
    lines = []
    for report in reports:
        own = verdict_lines(report)
        lines += [f"run {report.run_id}: {line}" for line in own] if len(reports) > 1 else own
    return Verdict(all(r.ok for r in reports), lines)


def verdict_lines(report: RunReport) -> list[str]:
    """What the run captured, then every way it falls short, as sentences."""
    lines = []
    if report.captured_nothing:
        lines.append("nothing captured: " + _nothing_because(report))
    else:
        by_backend: dict[str, list[File]] = {}
        for f in report.files:
            by_backend.setdefault(f.backend, []).append(f)
        for backend, files in sorted(by_backend.items()):
            steps = sorted({s for f in files for s in f.steps})
            ranks = sorted({f.rank for f in files})
            gone = sum(1 for f in files if not f.exists)
            lines.append(f"captured: {backend} wrote {len(files)} file{'s' if len(files) != 1 else ''} "
                         f"({size_text(sum(f.size for f in files))}) for steps {_list(steps) or '(not tied to a step)'} "
                         f"on ranks {_list(ranks)}" + (f"; {gone} of them no longer on disk" if gone else ""))
        for u in report.unavailable:
            lines.append(f"not captured on rank {u['rank']} ({u['host']}): {u['backend']}: {'; '.join(u['problems'])}")
    if report.anatomy.has_timings:
        steps = report.anatomy.steps
        lines.append(f"timings: {len(steps)} profiled step{'s' if len(steps) != 1 else ''}, "
                     f"{len(report.anatomy.regions)} regions, {len(report.anatomy.stragglers)} straggler flags")
    elif report.processes:
        lines.append("timings: none in the manifest (no profiled step completed, or written by an rlprof without step timings)")
    lines += problem_lines(report)
    lines.append("ok: every profiled step x role x rank produced output" if report.ok else
                 f"FAILED: {report.problem_count} problem{'s' if report.problem_count != 1 else ''}")
    return lines


def _nothing_because(report: RunReport) -> str:
    """Why a run wrote no file at all, from what its processes recorded."""
    unavailable = report.unavailable
    if unavailable:
        reasons = sorted({f"{u['backend']} cannot capture on {u['host']}: {'; '.join(u['problems'])}" for u in unavailable})
        return "; ".join(reasons)
    if report.errors:
        e = report.errors[0]
        return f"the backend failed ({e['backend']} in {e['hook']} on rank {e['rank']}: {e['error']})"
    if not report.anatomy.has_timings:
        return "no profiled step ran (the training stopped before the first profiled step, or steps never reached)"
    return "the backends wrote no file for the profiled steps"


def problem_lines(report: RunReport) -> list[str]:
    lines = []
    grouped: dict[tuple, dict[str, set]] = {}
    for m in report.missing:
        entry = grouped.setdefault((m["rank"], m["host"], m["pid"], m["backend"]), {"steps": set(), "roles": set()})
        entry["steps"].add(m["step"])
        entry["roles"].add(m["role"])
    for (rank, host, pid, backend), entry in sorted(grouped.items()):
        steps = ",".join(str(s) for s in sorted(entry["steps"]))
        roles = ",".join(sorted(entry["roles"], key=role_index))
        lines.append(f"missing: rank {rank} ({host} pid {pid}): {backend} wrote nothing for steps {steps} x roles {roles}")
    for s in report.short_captures:
        lines.append(f"missing: rank {s['rank']} ({s['host']} pid {s['pid']}): {s['backend']} wrote {s['captures']} "
                     f"of {s['expected']} expected captures")
    for p in report.unfinalized:
        lines.append(f"not finalized: {p.label}: no 'finalized' record (the process died, was killed, or is still running)")
    for e in report.errors:
        kind = f" ({e['kind']})" if e.get("kind") else ""
        lines.append(f"backend error{kind}: rank {e['rank']} ({e['host']} pid {e['pid']}): {e['backend']} in {e['hook']}: {e['error']}")
    for f in report.worker_failures:
        step = f" at step {f['step']}" if f.get("step") is not None else ""
        lines.append(f"worker failure: {f['worker']} (rank {f['worker_rank']}) {f['kind']} in {f['call']}{step}: {f['error']}")
    return lines


# ----------------------------------------------------------------------------------- details (C7)


def add_details(reports: Sequence[RunReport], *, warn: Callable[[str], None] | None = None) -> None:
    """Ask each file's backend for detail lines through the ``rlprof.report_details`` entry points.

    Only backends that registered a function are asked, only for files still on disk; a function
    that fails to import or raises gives one line saying so instead of breaking the report."""
    from importlib import metadata

    points = {ep.name: ep for ep in metadata.entry_points(group=DETAILS_GROUP)}
    wanted = {f.backend for r in reports for f in r.files if f.exists} & set(points)
    functions: dict[str, Any] = {}
    for name in sorted(wanted):
        try:
            functions[name] = points[name].load()
        except Exception as exc:  # a broken plugin must not break the report
            functions[name] = f"details unavailable: {points[name].value} failed to import: {type(exc).__name__}: {exc}"
            if warn:
                warn(f"rlprof report: {DETAILS_GROUP} entry point {name} = {points[name].value} failed to import: {exc}")
    for report in reports:
        for f in report.files:
            func = functions.get(f.backend)
            if func is None or not f.exists:
                continue
            if isinstance(func, str):
                f.details = [func]
                continue
            try:
                f.details = [str(line) for line in (func(Path(f.path)) or [])]
            except Exception as exc:
                f.details = [f"details unavailable: {type(exc).__name__}: {exc}"]


# ----------------------------------------------------------------------------------- rendering


def render(report: RunReport) -> str:
    """The report as text: header, step anatomy, stragglers, files, verdict."""
    modes = ", ".join(sorted({p.mode for p in report.processes})) or "?"
    tools = ", ".join(sorted({t for p in report.processes for t in p.tools})) or "?"
    hosts = sorted({p.host for p in report.processes})
    status = "ok" if report.ok else "FAILED"
    lines = [f"run {report.run_id}: {status}; mode {modes}; tools {tools}; {len(report.processes)} profiling process{'es' if len(report.processes) != 1 else ''} on "
             f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}"]
    lines += [f"  {d}" for d in report.run_dirs]
    lines += _anatomy_lines(report.anatomy)
    lines += _file_lines(report.files)
    lines.append("")
    lines.append("verdict:")
    lines += [f"  {line}" for line in verdict_lines(report)]
    lines.append("problems: none" if report.ok else f"problems: {report.problem_count}")
    return "\n".join(lines)


STEP_TABLES = 3
"""Up to this many profiled steps get a table each; more are summarised in one table (median per step)."""


def _anatomy_lines(anatomy: Anatomy) -> list[str]:
    if len(anatomy.steps) > STEP_TABLES:
        return _summary_lines(anatomy) + _straggler_lines(anatomy)
    lines: list[str] = []
    for step in anatomy.steps:
        lines.append("")
        if step.spread is None:
            lines.append(f"step {step.step}: no step record (a process stopped inside it)")
        else:
            s = step.spread
            lines.append(f"step {step.step}: {s.median_ms:.1f} ms median over {len(s.per_rank)} rank"
                         f"{'s' if len(s.per_rank) != 1 else ''} (min {s.min_ms:.1f}, max {s.max_ms:.1f} on rank {s.slowest_rank})")
        rows = [("region", "ranks", "min_ms", "median_ms", "max_ms", "slowest", "share", "")]
        for r in step.regions:
            name = ("  " * r.depth) + r.region
            flags = []
            if r.stragglers:
                flags.append("straggler: rank " + ",".join(map(str, r.stragglers)))
            if r.errors:
                flags.append(f"raised on {len(r.errors)} rank{'s' if len(r.errors) != 1 else ''}")
            counts = {t.count for t in r.spread.per_rank}
            if counts != {1}:
                flags.append(f"x{max(counts)} per rank")
            rows.append((name, str(len(r.spread.per_rank)), f"{r.spread.min_ms:.1f}", f"{r.spread.median_ms:.1f}",
                         f"{r.spread.max_ms:.1f}", f"rank {r.spread.slowest_rank}", _pct(r.share_of_step), "; ".join(flags)))
        if step.untracked_ms is not None and step.regions:
            share = step.untracked_ms / step.spread.median_ms if step.spread.median_ms else None
            rows.append(("(outside regions)", "", "", f"{step.untracked_ms:.1f}", "", "", _pct(share), ""))
        lines += _table(rows, indent="  ")
    return lines + _straggler_lines(anatomy)


def _summary_lines(anatomy: Anatomy) -> list[str]:
    lines = ["", f"{len(anatomy.steps)} profiled steps:"]
    for step in anatomy.steps:
        s = step.spread
        lines.append(f"  step {step.step}: " + ("no step record" if s is None else
                     f"{s.median_ms:.1f} ms median (min {s.min_ms:.1f}, max {s.max_ms:.1f} on rank {s.slowest_rank})"))
    lines.append("")
    lines.append("regions (per rank the median over steps, then across ranks):")
    rows = [("region", "steps", "min_ms", "median_ms", "max_ms", "slowest", "share", "")]
    for r in anatomy.regions:
        rows.append((("  " * r.depth) + r.region, str(r.steps), f"{r.spread.min_ms:.1f}", f"{r.spread.median_ms:.1f}",
                     f"{r.spread.max_ms:.1f}", f"rank {r.spread.slowest_rank}", _pct(r.share_of_step), ""))
    return lines + _table(rows, indent="  ")


def _straggler_lines(anatomy: Anatomy) -> list[str]:
    lines: list[str] = []
    if anatomy.stragglers:
        lines.append("")
        lines.append(f"stragglers ({len(anatomy.stragglers)}):")
        for s in sorted(anatomy.stragglers, key=lambda s: -(s.ms - s.median_ms))[:FILES_SHOWN]:
            lines.append(f"  step {s.step} {s.region}: rank {s.rank} ({s.host}) {s.ms:.1f} ms vs median {s.median_ms:.1f} ms (+{s.over_pct:.0f}%)")
        if len(anatomy.stragglers) > FILES_SHOWN:
            lines.append(f"  ... and {len(anatomy.stragglers) - FILES_SHOWN} more (--json lists all)")
    return lines


def _file_lines(files: list[File]) -> list[str]:
    if not files:
        return ["", "files: none"]
    gone = sum(1 for f in files if not f.exists)
    lines = ["", f"files ({len(files)}, {size_text(sum(f.size for f in files))}"
                 + (f"; {gone} no longer on disk" if gone else "") + "):"]
    shown = files[:FILES_SHOWN]
    rank_w = max(len(str(f.rank)) for f in shown)
    backend_w = max(len(f.backend) for f in shown)
    for f in shown:
        lines.append(f"  rank {f.rank:<{rank_w}}  {f.backend:<{backend_w}}  {size_text(f.size):>10}  {_shown(f.path)}"
                     + ("" if f.exists else "  (no longer on disk)"))
        lines += [f"      {d}" for d in f.details]
    if len(files) > FILES_SHOWN:
        lines.append(f"  ... and {len(files) - FILES_SHOWN} more (--json lists all)")
    return lines


def _table(rows: list[tuple[str, ...]], indent: str) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
        out.append((indent + "  ".join(cells) + ("  " + row[-1] if row[-1] else "")).rstrip())
    return out


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _list(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ----------------------------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof report", description="Where each profiled step's time went, per region and rank, and what the run captured or missed.")
    parser.add_argument("paths", nargs="+", metavar="RUN", help="save paths (one per node), run directories or manifest files")
    parser.add_argument("--run", default=None, help="only the run with this id (or unique prefix); default: every run found, newest first")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--html", action="store_true", help="write a self-contained HTML page to -o FILE")
    parser.add_argument("-o", "--output", default=None, metavar="FILE", help="where --html writes")
    parser.add_argument("--straggler-pct", type=float, default=STRAGGLER_PCT,
                        help=f"flag a rank more than this many percent over a region's median (default {STRAGGLER_PCT:g})")
    parser.add_argument("--no-details", action="store_true", help=f"do not ask backends for per-file details ({DETAILS_GROUP})")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if opts.html and not opts.output:
        parser.error("--html needs -o FILE")
    absent = [p for p in opts.paths if not Path(p).exists()]
    if absent:
        print(f"rlprof report: not found: {', '.join(absent)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        reports = build_reports(opts.paths, run=opts.run, straggler_pct=opts.straggler_pct)
    except LookupError as exc:
        print(f"rlprof report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not reports:
        print(f"rlprof report: no rlprof manifests under {', '.join(opts.paths)}: nothing was profiled there", file=sys.stderr)
        return EXIT_USAGE
    if not opts.no_details:
        add_details(reports, warn=lambda line: print(line, file=sys.stderr))
    if opts.html:
        from .html_report import render_page

        try:
            Path(opts.output).write_text(render_page(reports), encoding="utf-8")
        except OSError as exc:
            print(f"rlprof report: cannot write {opts.output}: {exc}", file=sys.stderr)
            return EXIT_PROBLEMS
        print(f"rlprof report: wrote {opts.output} ({len(reports)} run{'s' if len(reports) != 1 else ''})", file=sys.stderr)
    if opts.json:
        print(json.dumps({"runs": [r.as_dict() for r in reports]}, indent=1))
    elif not opts.html:
        print("\n\n".join(render(r) for r in reports))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_PROBLEMS
