"""Inside each region of a run, in ``rlprof report``: compute, exposed communication, copies and idle
from the run's own traces, joined to the manifest's regions; and who was late when a rank waited.

When: ``rlprof report`` (``report --html``, ``report --json``) calls :func:`add_inside` whenever the run's
traces are on this disk, or their nodes shipped their rows to the controller's run directory (a Ray
run: :mod:`rlprof.integrations.node_rows`); ``--no-traces`` skips it. The manifest says how long a region took on each
process; its traces say *why*. Each trace is read once by its backend's reader (the ``trace_reader``
hook, loaded only for the backends whose files the run holds) and its rows cached in the run's own
``breakdown/`` folder (:mod:`rlprof.analysis.breakdown_files`), so a second report reads no trace.

What it adds to a :class:`~rlprof.analysis.runs.RunReport` (``report.inside``):

* one :class:`Split` per (step, region, process) the manifest knows and a trace covers: the rows of
  docs/analysis.md ("Inside a region"), added up when the region ran twice in the step;
* per (step, region, component) the cross-process **skew**, (max − min) / mean, naming the process
  with the most, flagged when that process stands clear of the others as a straggler does
  (:mod:`rlprof.analysis.noise`): its excess over the other processes' median passes the noise of the
  differences between processes in that component by :data:`SKEW_FLAG` of that median
  (msprof-analyze's threshold) and by the floor (1 ms, or 1% of the step);
* **waits**: a process that spent a part of a region waiting in a collective for a later rank is
  named with the rank it waited for and how late that rank entered the region; a process flagged as
  a straggler that would not stand clear of the noise without that wait is *not* a straggler (the late
  rank is the cause), and its flag is taken off the anatomy.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rlprof.analysis.anatomy import REPLICAS_AFTER, RankTime, process_name
from rlprof.row_model import LABELS, WINDOW_PARTS, REPORT, Row, columns, known, shown
from rlprof.analysis.rows_cache import FileRows, shipped
from rlprof.analysis.breakdown_files import breakdown
from rlprof.analysis.trace_readers import reader_for, readers
from rlprof.analysis.noise import MARGIN, between_processes, others_medians, stands_clear
from rlprof.analysis.runs import File, RunReport
from rlprof.layout import shipped_rows_path

SHOWN = columns(REPORT)
"""What the report's table and the HTML page show per region (the :class:`~rlprof.row_model.Row`
columns listed there: the parts, then every copy's time)."""

SKEW_FLAG = MARGIN
"""A component whose largest value passes the other processes' median by the noise, 5% of that median
(msprof-analyze flags skews above 5%) and the floor is flagged."""

WAIT_SHOWN = 0.05
"""A wait is said when it is more than 5% of the waiting process's time in the region."""


@dataclass(kw_only=True)
class Split(Row):
    """One process in one region in one step: the rows of its trace(s) for that region, added up when the
    region ran twice (:meth:`Row.add`); ``rank`` and ``step`` are the manifest's. Every column of
    :class:`~rlprof.row_model.Row` is here: a column added there reaches the report's JSON,
    text and HTML without a word here."""

    replica_rank: int | None = None

    @property
    def name(self) -> str:
        return process_name(self.rank, self.replica_rank)

    def share(self, component: str) -> float:
        """The component as a fraction of the region's wall time."""
        return getattr(self, component) / self.wall_ms if self.wall_ms > 0 else 0.0


@dataclass
class Skew:
    step: int
    region: str
    component: str
    skew: float
    """(max − min) / mean across the processes that ran the region."""
    most: str
    """The process with the largest value."""
    flagged: bool = False
    """The difference stands clear of the noise (module docstring)."""


@dataclass
class Waited:
    """``rank 1 waited 4.1 ms in allreduce for rank 0, late by 5.8 ms entering actor_update``."""

    step: int
    region: str
    waiter: str
    wait_ms: float
    collective: str
    late: str
    late_by_ms: float | None
    """How much later the late rank entered the region than the waiter (the host's clock; negative: it
    entered first and was slower before the collective); None when the manifest does not say (another
    host, or no record of the late rank in that region)."""
    was_flagged: bool = False
    """The anatomy had flagged the waiter as a straggler; its excess was this wait, so the flag was taken off."""

    def line(self) -> str:
        if self.late_by_ms is None:
            late_by = ""
        elif self.late_by_ms > 0:
            late_by = f", late by {self.late_by_ms:.1f} ms entering {self.region}"
        else:  # it came in first, and still reached the collective last: its time went inside the region
            late_by = f", which entered {self.region} {-self.late_by_ms:.1f} ms earlier and was slower inside it"
        return (f"step {self.step} {self.region}: {self.waiter} waited {self.wait_ms:.1f} ms in {short_collective(self.collective)} "
                f"for {self.late}{late_by}" + (" (not a straggler: the wait was the late rank's)" if self.was_flagged else ""))


@dataclass
class Inside:
    splits: list[Split] = field(default_factory=list)
    skews: list[Skew] = field(default_factory=list)
    waits: list[Waited] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    """``(path, reason)`` of each trace that could not be read (one line each; the report goes on)."""

    def of(self, step: int, region: str) -> list[Split]:
        return [s for s in self.splits if s.step == step and s.region == region]

    def as_dict(self) -> dict[str, Any]:
        return {"splits": [{**asdict(s), "name": s.name} for s in self.splits],
                "skew": [asdict(k) for k in self.skews],
                "waits": [{**asdict(w), "line": w.line()} for w in self.waits],
                "errors": [{"path": path, "reason": reason} for path, reason in self.errors]}


def short_collective(name: str) -> str:
    """``c10d::allreduce_`` -> ``allreduce``; ``gloo:all_reduce`` -> ``all_reduce``; a kernel's name as it is."""
    for prefix in ("c10d::", "gloo:", "nccl:"):
        if name.startswith(prefix):
            return name[len(prefix):].rstrip("_")
    return name


def add_inside(reports: Sequence[RunReport], *, workers: int = 2,
               warn: Callable[[str], None] | None = None) -> None:
    """Set ``report.inside`` from the reports' traces a backend can read: those on this disk, and
    for those that stay on another node, the rows that node shipped to this run directory."""
    away = {r.run_id: {f.path: rows for f in r.files if not f.exists
                       for rows in [_shipped_rows(r, f)] if rows is not None} for r in reports}
    wanted = {f.backend for r in reports for f in r.files if f.exists or f.path in away[r.run_id]}
    if not wanted:
        return
    answers, problems = readers(wanted)
    for line in problems:
        if warn:
            warn(f"rlprof report: {line}")
    for report in reports:
        files = {f.path: f for f in report.files if (f.exists or f.path in away[report.run_id]) and f.backend in answers
                 and reader_for(Path(f.path), {f.backend: answers[f.backend]})}
        if not files:
            continue
        here = [Path(p) for p, f in files.items() if f.exists]
        rows, errors = breakdown(here, workers=workers, answers=answers,
                                 shipped=[away[report.run_id][p] for p, f in files.items() if not f.exists])
        report.inside = inside_of(report, rows, files)
        report.inside.errors = errors
        for path, reason in errors:
            if warn:
                warn(f"rlprof report: {path}: {reason}")


def _shipped_rows(report: RunReport, f: File) -> FileRows | None:
    """The rows of a trace that is not on this disk, as its node shipped them to a run directory of
    ``report`` (None when none did, or they are not the rows of the file the manifest lists)."""
    for run_dir in report.run_dirs:
        rows = shipped(shipped_rows_path(Path(run_dir), f.node, f.path), f.path, f.size)
        if rows is not None:
            return rows
    return None


def inside_of(report: RunReport, rows: Sequence[Row], files: dict[str, File]) -> Inside:
    """Join trace rows to the manifest's (step, region, process), then the skews and the waits."""
    order = {(s.step, r.region): i for i, (s, r) in enumerate((s, r) for s in report.anatomy.steps for r in s.regions)}
    joined: dict[tuple[int, str, int], Split] = {}
    for row in rows:
        f = files[row.path]
        step = row.step if row.step is not None else (f.steps[0] if len(f.steps) == 1 else None)
        if step is None or (step, row.region) not in order:
            continue  # ProfilerStep#N, the whole trace, a user's own annotation: `rlprof breakdown` shows them
        key = (step, row.region, f.rank if f.replica_rank is None else REPLICAS_AFTER + f.replica_rank)
        joined[key] = _added(joined.get(key), row, step, f)
    inside = Inside(splits=sorted(joined.values(), key=lambda s: (order[(s.step, s.region)], s.rank, s.replica_rank or 0)))
    inside.skews = _skews(inside.splits, {s.step: s.spread.median_ms for s in report.anatomy.steps if s.spread})
    inside.waits = _waits(report, inside)
    return inside


def _added(split: Split | None, row: Row, step: int, f: File) -> Split:
    if split is None:
        return Split(**{**vars(row), "step": step, "rank": f.rank, "replica_rank": f.replica_rank})
    split.add(row)
    return split


def _skews(splits: list[Split], step_ms: dict[int, float]) -> list[Skew]:
    """Every (step, region, component) skew across processes, flagged where the process with the most
    stands clear of the others as a straggler does in a region's time (:mod:`rlprof.analysis.noise`): its
    excess over the other processes' median passes the noise of the differences between processes in that
    component (:func:`~rlprof.analysis.noise.between_processes`) by :data:`SKEW_FLAG` of that median and by
    the floor."""
    cells: dict[tuple[int, str], list[Split]] = {}
    for s in splits:
        cells.setdefault((s.step, s.region), []).append(s)
    steps: dict[tuple[str, str], list[dict[str, float]]] = {}
    """(region, component) -> per step, each process's value"""
    for (_, region), members in cells.items():
        for component in WINDOW_PARTS:
            steps.setdefault((region, component), []).append({s.name: getattr(s, component) for s in members})
    noise = {key: between_processes(values) for key, values in steps.items()}
    skews = []
    for (step, region), members in cells.items():
        if len(members) < 2:
            continue
        for component in WINDOW_PARTS:
            values = {s.name: getattr(s, component) for s in members}
            mean = statistics.fmean(values.values())
            if mean > 0:
                most = max(members, key=lambda s: getattr(s, component)).name
                others = others_medians(values)[most]
                clear = stands_clear(values[most] - others, noise[region, component].get(most, 0.0), others, SKEW_FLAG,
                                     step_ms.get(step))
                skews.append(Skew(step, region, component, (max(values.values()) - min(values.values())) / mean, most, clear))
    return skews


def _waits(report: RunReport, inside: Inside) -> list[Waited]:
    """The waits worth saying, and stragglers whose excess was a wait taken off the anatomy: judged again
    on every process's time less its wait (the noise, the others' median and the excess alike), a
    straggler that no longer stands clear was late only because another rank was. A waiter that entered
    the region earlier than the late rank by more than its measured wait (on one host, where the clocks
    agree) is judged on its time less that head start: on a loaded machine part of the wait shows as
    slower work before the collective rather than as time inside it (a CI run flagged such a waiter)."""
    entered: dict[tuple[int, str, str], RankTime] = {(s.step, r.region, t.name): t
                                                     for s in report.anatomy.steps for r in s.regions for t in r.spread.per_rank}
    flagged = {(s.step, s.region, s.time.name): s for s in report.anatomy.stragglers}
    waited = {(s.step, s.region, s.name): s.communication_wait_ms or 0.0 for s in inside.splits}
    own: dict[tuple[int, str], dict[str, float]] = {}
    """(step, region) -> process -> its time less its wait"""
    for (step, region, name), t in entered.items():
        own.setdefault((step, region), {})[name] = t.ms - waited.get((step, region, name), 0.0)
    by_region: dict[str, list[dict[str, float]]] = {}
    for (_, region), values in own.items():
        by_region.setdefault(region, []).append(values)
    own_noise = {region: between_processes(steps) for region, steps in by_region.items()}
    waits = []
    for s in inside.splits:
        wait = s.communication_wait_ms or 0.0
        if s.waited_for_rank is None or not s.waited_in or wait <= WAIT_SHOWN * s.wall_ms:
            continue
        late = process_name(s.waited_for_rank, None)
        waiter, other = entered.get((s.step, s.region, s.name)), entered.get((s.step, s.region, late))
        same_host = waiter is not None and other is not None and waiter.host == other.host
        late_by = (other.start_ns - waiter.start_ns) / 1e6 if same_host and other.start_ns and waiter.start_ns else None
        straggler = flagged.get((s.step, s.region, s.name))
        excused = False
        if straggler is not None:
            values = dict(own[s.step, s.region])
            if late_by is not None and late_by > wait:  # it entered that much earlier: all of it was spent on the late rank
                values[s.name] = waiter.ms - late_by
            margin = straggler.bar_ms - straggler.noise_ms  # the margins it had to pass, beyond the noise
            excused = values[s.name] - others_medians(values)[s.name] <= own_noise[s.region].get(s.name, 0.0) + margin
        if excused:
            _unflag(report, straggler)
        waits.append(Waited(s.step, s.region, s.name, wait, s.waited_in, late, late_by, excused))
    return waits


def _unflag(report: RunReport, straggler: Any) -> None:
    report.anatomy.stragglers.remove(straggler)
    for step in report.anatomy.steps:
        for region in step.regions:
            if step.step == straggler.step and region.region == straggler.region:
                region.stragglers = [t for t in region.stragglers if t.key != straggler.time.key]


def components(report: RunReport, region: str, name: str | None = None) -> dict[str, float] | None:
    """A region's four parts (ms) in one run as ``rlprof compare`` times regions: per process the median
    over profiled steps, then the median across processes (only process ``name`` when given); None
    when the run's traces said nothing about it."""
    inside = report.inside
    if inside is None:
        return None
    per_process: dict[str, list[Split]] = {}
    for s in inside.splits:
        if s.region == region and (name is None or s.name == name):
            per_process.setdefault(s.name, []).append(s)
    if not per_process:
        return None
    return {c: statistics.median(statistics.median(getattr(s, c) for s in splits) for splits in per_process.values())
            for c in WINDOW_PARTS}


def moved(a: RunReport, b: RunReport, region: str, name: str | None = None) -> str | None:
    """Which part of ``region`` moved most from run A to run B (``idle +12.3 ms``), or None when either
    run's traces are not here."""
    before, after = components(a, region, name), components(b, region, name)
    if before is None or after is None:
        return None
    component = max(WINDOW_PARTS, key=lambda c: abs(after[c] - before[c]))
    change = after[component] - before[component]
    return f"{LABELS[component]} {change:+.2f} ms" if abs(change) >= 0.005 else None


# ----------------------------------------------------------------------------------- text


def inside_lines(report: RunReport) -> list[str]:
    """Under the anatomy: per step and region the median split across processes (% of wall), the
    flagged skews, and the waits with who was late."""
    inside: Inside | None = getattr(report, "inside", None)
    if inside is None or not inside.splits:
        return []
    lines = ["", "inside regions (from the traces; % of wall, median across processes; compute + exposed comm + "
                 "exposed memory + idle = the window; memory: every copy, hidden or not; docs/analysis.md):"]
    listed = known(inside.splits, SHOWN)
    rows = [("step", "region", "procs", *(LABELS[c] for c in listed), "")]
    for (step, region) in dict.fromkeys((s.step, s.region) for s in inside.splits):
        members = inside.of(step, region)
        skewed = [k for k in inside.skews if k.step == step and k.region == region and k.flagged]
        note = "; ".join(f"{LABELS[k.component]} skew {100 * k.skew:.0f}% ({k.most})" for k in skewed)
        rows.append((str(step), region, str(len(members)), *(shown(members, c) for c in listed), note))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [row[0].rjust(widths[0]), row[1].ljust(widths[1])] + [c.rjust(w) for c, w in zip(row[2:-1], widths[2:])]
        lines.append(("  " + "  ".join(cells) + ("  " + row[-1] if row[-1] else "")).rstrip())
    if inside.waits:
        lines += ["", f"waiting in collectives ({len(inside.waits)}; the late rank's fault, not the waiter's):"]
        lines += [f"  {w.line()}" for w in sorted(inside.waits, key=lambda w: -w.wait_ms)[:24]]
    return lines
