"""``rlprof report SAVE_PATH [SAVE_PATH ...] [--run ID | --all-runs] [--json]``: what a run produced.

Use it after a run, on one machine or over every node's ``save_path`` at once (save paths are
node-local; each process wrote its own manifest, so directories copied from several nodes merge).
It prints one row per profiled step x role x rank x backend: the captures and files, their size,
and, where a reader for the file's format exists (:mod:`rlprof.traces`), how long each of the
role's ranges took. Then it lists what the plan expected but did not get:

* a step x role that a process's ``process`` record selected, for which a backend wrote nothing;
* fewer capture windows than the plan expected (``expected_captures``);
* processes that never wrote ``finalized`` (killed, crashed, or still running);
* backend hook errors, and workers the Ray controller lost (``worker_failure`` records).

The newest run is shown unless ``--run ID`` (or a unique prefix) or ``--all-runs`` is given.
Exit status: 0 nothing missing, 1 something is missing or failed, 2 no manifests found / usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .config import ROLES
from .manifest import read_records
from .ray import FAILURE_RECORD
from .traces import Range, read_ranges

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


@dataclass
class Process:
    """One profiling process of the run, from its ``process`` record."""

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


@dataclass
class Cell:
    """What one backend produced for one step x role on one process."""

    step: int | None
    role: str
    rank: int
    host: str
    pid: int
    backend: str
    captures: list[str] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=dict)
    """Absolute path -> size in bytes."""
    iterations: dict[str, list[list[int]]] = field(default_factory=dict)
    """Region -> the sampled iteration spans ``[first, last]`` its captures hold (sampled roles only)."""
    ranges: dict[str, dict[str, float]] = field(default_factory=dict)
    """Range name -> ``{"ms": total, "count": n}`` (only where the file format has a reader)."""
    unreadable: list[str] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(self.files.values())


@dataclass
class RunReport:
    run_id: str
    run_dirs: list[str]
    processes: list[Process]
    cells: list[Cell]
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
    def problem_count(self) -> int:
        return len(self.missing) + len(self.short_captures) + len(self.errors) + len(self.worker_failures) + len(self.unfinalized)

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_id,
            "run_dirs": self.run_dirs,
            "modes": sorted({p.mode for p in self.processes}),
            "tools": sorted({t for p in self.processes for t in p.tools}),
            "processes": [asdict(p) for p in self.processes],
            "rows": [{**asdict(c), "size": c.size} for c in self.cells],
            "missing": self.missing,
            "short_captures": self.short_captures,
            "unfinalized": [asdict(p) for p in self.unfinalized],
            "unavailable": self.unavailable,
            "errors": self.errors,
            "worker_failures": self.worker_failures,
            "ok": self.problem_count == 0,
        }


# ----------------------------------------------------------------------------------- building


def build_reports(paths: Iterable[str | Path], run: str | None = None, all_runs: bool = False) -> list[RunReport]:
    """Reports for the runs found under ``paths``: the newest, the one named ``run`` (id or unique
    prefix), or all of them, oldest first.

    :raises LookupError: ``run`` matches no run, or several.
    """
    by_run: dict[str, list[dict[str, Any]]] = {}
    for record in read_records(paths):
        by_run.setdefault(str(record.get("run")), []).append(record)
    if not by_run:
        return []
    if run is not None:
        chosen = [r for r in by_run if r == run] or [r for r in by_run if r.startswith(run)]
        if len(chosen) != 1:
            found = ", ".join(sorted(by_run))
            raise LookupError(f"--run {run!r} matches {len(chosen) or 'no'} runs; runs found: {found}")
    else:
        chosen = sorted(by_run) if all_runs else [max(by_run)]  # run ids sort by start time
    return [build_report(run_id, by_run[run_id]) for run_id in sorted(chosen)]


def build_report(run_id: str, records: Sequence[dict[str, Any]]) -> RunReport:
    """The report of one run from its manifest records (all nodes' together)."""
    processes: dict[str, Process] = {}
    for r in records:
        if r["type"] == "process":
            processes[r["_manifest"]] = Process(
                manifest=r["_manifest"], rank=r["rank"], host=r["host"], pid=r["pid"], roles=r.get("roles", []),
                selected_roles=r.get("selected_roles", []), steps=r.get("steps", []), mode=r.get("mode", "?"),
                tools=r.get("tools", []), replica_rank=r.get("replica_rank"), expected_captures=r.get("expected_captures"),
                environment=r.get("environment") or {},
            )
    for r in records:
        if r["type"] == "finalized" and r["_manifest"] in processes:
            processes[r["_manifest"]].finalized = r.get("reason", "end")
    cells = _cells([r for r in records if r["type"] == "artifact"])
    ordered = sorted(processes.values(), key=lambda p: (p.rank, p.host, p.pid))
    return RunReport(
        run_id=run_id,
        run_dirs=sorted({r["_run_dir"] for r in records}),
        processes=ordered,
        cells=sorted(cells.values(), key=_row_order),
        missing=_missing(ordered, cells),
        short_captures=_short_captures(ordered, [r for r in records if r["type"] == "artifact"]),
        errors=[_plain(r, "rank", "host", "pid", "backend", "hook", "error") for r in records if r["type"] == "error"],
        worker_failures=[_plain(r, "worker", "worker_rank", "call", "step", "kind", "error")
                         for r in records if r["type"] == FAILURE_RECORD],
    )


def _cells(artifacts: list[dict[str, Any]]) -> dict[tuple, Cell]:
    """Artifacts grouped by (step, role, process, backend), with the durations of the role's ranges."""
    cells: dict[tuple, Cell] = {}
    ranges_of: dict[str, dict[str, Range] | str] = {}  # one read per file, shared by the roles it holds
    for a in artifacts:
        path = Path(a["_run_dir"]) / a["path"]
        if str(path) not in ranges_of:
            try:
                ranges_of[str(path)] = read_ranges(path)
            except (OSError, ValueError) as exc:
                ranges_of[str(path)] = f"{path.name}: {type(exc).__name__}: {exc}"
        found = ranges_of[str(path)]
        for step in a.get("steps") or [None]:
            for role in a.get("roles") or []:
                key = (step, role, a["_manifest"], a["backend"])
                cell = cells.get(key)
                if cell is None:
                    cell = cells[key] = Cell(step=step, role=role, rank=a["rank"], host=a["host"], pid=a["pid"], backend=a["backend"])
                if a.get("capture") and a["capture"] not in cell.captures:
                    cell.captures.append(a["capture"])
                cell.files[str(path)] = a.get("size", 0)
                if a.get("iterations"):
                    cell.iterations.setdefault(a.get("region") or role, []).append(list(a["iterations"]))
                if isinstance(found, str):
                    cell.unreadable.append(found)
                    continue
                for name, rng in found.items():
                    if name == role or name.startswith(role + "_"):
                        total = cell.ranges.setdefault(name, {"ms": 0.0, "count": 0})
                        total["ms"] += rng.ms
                        total["count"] += rng.count
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
    role_index = ROLES.index(cell.role) if cell.role in ROLES else len(ROLES)
    return (cell.step if cell.step is not None else -1, role_index, cell.rank, cell.host, cell.pid, cell.backend)


# ----------------------------------------------------------------------------------- rendering


def render(report: RunReport) -> str:
    """The report as text: a header, the table, then everything that is missing or failed."""
    modes = ", ".join(sorted({p.mode for p in report.processes})) or "?"
    tools = ", ".join(sorted({t for p in report.processes for t in p.tools})) or "?"
    hosts = sorted({p.host for p in report.processes})
    lines = [f"run {report.run_id}: mode {modes}; tools {tools}; {len(report.processes)} profiling processes on "
             f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}"]
    lines += [f"  {d}" for d in report.run_dirs]
    header = ("step", "role", "rank", "backend", "captures", "files", "size", "ranges (ms; x count; sampled iterations)")
    rows = [header]
    for c in report.cells:
        rows.append((
            "-" if c.step is None else str(c.step), c.role, str(c.rank), c.backend, str(len(c.captures)),
            str(len(c.files)), _size(c.size), _ranges_text(c),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    if len(rows) == 1:
        lines.append("(no artifacts)")
    problems = _problem_lines(report)
    notices = [f"not captured here: rank {u['rank']} ({u['host']} pid {u['pid']}): {u['backend']}: {'; '.join(u['problems'])}"
               for u in report.unavailable]
    lines.append("")
    lines += notices
    lines.append(f"problems ({len(problems)}):" if problems else "problems: none: every profiled step x role x rank produced output")
    lines += [f"  {p}" for p in problems]
    return "\n".join(lines)


def _problem_lines(report: RunReport) -> list[str]:
    lines = []
    grouped: dict[tuple, dict[str, set]] = {}
    for m in report.missing:
        entry = grouped.setdefault((m["rank"], m["host"], m["pid"], m["backend"]), {"steps": set(), "roles": set()})
        entry["steps"].add(m["step"])
        entry["roles"].add(m["role"])
    for (rank, host, pid, backend), entry in sorted(grouped.items()):
        steps = ",".join(str(s) for s in sorted(entry["steps"]))
        roles = ",".join(r for r in ROLES if r in entry["roles"])
        lines.append(f"missing: rank {rank} ({host} pid {pid}): {backend} wrote nothing for steps {steps} x roles {roles}")
    for s in report.short_captures:
        lines.append(f"missing: rank {s['rank']} ({s['host']} pid {s['pid']}): {s['backend']} wrote {s['captures']} "
                     f"of {s['expected']} expected captures")
    for p in report.unfinalized:
        lines.append(f"not finalized: {p.label}: no 'finalized' record (the process died, was killed, or is still running)")
    for e in report.errors:
        lines.append(f"backend error: rank {e['rank']} ({e['host']} pid {e['pid']}): {e['backend']} in {e['hook']}: {e['error']}")
    for f in report.worker_failures:
        step = f" at step {f['step']}" if f.get("step") is not None else ""
        lines.append(f"worker failure: {f['worker']} (rank {f['worker_rank']}) {f['kind']} in {f['call']}{step}: {f['error']}")
    return lines


def _ranges_text(cell: Cell) -> str:
    """``actor_compute_log_prob 0.8, actor_update 3.4 x2 (it 1, 3)``; regions with no readable range
    but sampled iterations still show the iterations."""
    parts = []
    for name in sorted(set(cell.ranges) | set(cell.iterations)):
        text = name
        if name in cell.ranges:
            v = cell.ranges[name]
            text += f" {v['ms']:.1f}" + (f" x{v['count']}" if v["count"] > 1 else "")
        if name in cell.iterations:
            text += " (it " + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in cell.iterations[name]) + ")"
        parts.append(text)
    if cell.unreadable:
        parts.append("unreadable: " + cell.unreadable[0])
    return ", ".join(parts) or "-"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ----------------------------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof report", description="What a profiled run produced, per step x role x rank, and what is missing.")
    parser.add_argument("paths", nargs="+", metavar="SAVE_PATH", help="save paths (one per node), run directories or manifest files")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", default=None, help="the run id (or a unique prefix) to show; default: the newest")
    which.add_argument("--all-runs", action="store_true", help="show every run found")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    absent = [p for p in opts.paths if not Path(p).exists()]
    if absent:
        print(f"rlprof report: not found: {', '.join(absent)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        reports = build_reports(opts.paths, run=opts.run, all_runs=opts.all_runs)
    except LookupError as exc:
        print(f"rlprof report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not reports:
        print(f"rlprof report: no rlprof manifests under {', '.join(opts.paths)}", file=sys.stderr)
        return EXIT_USAGE
    if opts.json:
        print(json.dumps({"runs": [r.as_dict() for r in reports]}, indent=2))
    else:
        print("\n\n".join(render(r) for r in reports))
    return EXIT_OK if all(r.problem_count == 0 for r in reports) else EXIT_PROBLEMS
