"""What a run's report holds: its processes, its files (each once), what each process captured per step and role,
and the :class:`RunReport` every view of a run starts from (built by :mod:`rlprof.analysis.runs`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlprof.analysis.anatomy import Anatomy, process_name
from rlprof.analysis.cost import ProfilingCost
from rlprof.analysis.overlap import Overlap
from rlprof.analysis.rollout_requests import RunRequests
from rlprof.analysis.step_series import StepSeries
from rlprof.manifest import ProcessRecord

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
    requests: RunRequests | None = None
    """The rollout's requests, every step (:mod:`rlprof.analysis.rollout_requests`); None: no step recorded any."""
    armed: list[dict[str, Any]] = field(default_factory=list)
    """What the driver of an armed run said its captures nobody planned came to (``armed`` records: ``tools``,
    ``mode``, ``trigger``, ``steps``, ``captured``, ``outcome``): the run's tools and mode where no process
    profiled, and why nothing was captured."""
    compute: Any = None
    """What the compute achieved (:class:`rlprof.analysis.compute.Compute`, set by ``add_compute``); None until asked."""

    @property
    def modes(self) -> list[str]:
        """The capture modes of the run's profiling processes, else what its armed driver said."""
        return sorted({p.mode for p in self.processes} or {m for a in self.armed for m in a["mode"].split(", ") if m != "?"})

    @property
    def tools(self) -> list[str]:
        """The tools of the run's profiling processes, else those its armed driver named."""
        return sorted({t for p in self.processes for t in p.tools} or {t for a in self.armed for t in a["tools"]})

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
            "modes": self.modes,
            "tools": self.tools,
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
            "armed": self.armed,
            "requests": self.requests.as_dict() if self.requests is not None else None,
            "compute": self.compute.as_dict() if self.compute is not None else None,
        }
