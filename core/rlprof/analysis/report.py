"""A run's report as text: what it captured and where its steps' time went (``rlprof report``, :mod:`rlprof.cli.report`).

Use it after a run, on one machine or over every node's ``save_path`` at once (save paths are
node-local; each process wrote its own manifest, so directories copied from several nodes merge).
The timings come from the manifests, so a report still works after the traces were uploaded and
removed; where the traces are on this disk, their split inside each region is added (read once,
cached in the run's ``breakdown/`` folder, never beside a trace; ``--no-traces`` opens none). For each run, newest first:

* **every step** (:mod:`rlprof.analysis.step_series`): each step's time and each role's, from the run's
  step metrics file, and why each captured step was captured;
* the **step anatomy** (:mod:`rlprof.analysis.anatomy`): per profiled step its time across ranks and, per
  region, ``min_ms``/``median_ms``/``max_ms``, ``slowest_rank`` and ``share_of_step``; stragglers flagged;
* **inside regions** (:mod:`rlprof.analysis.inside`): compute / exposed communication / exposed memory /
  idle (and every copy's time) as % of wall per region, cross-process skew, and who waited in a collective for which late rank;
* the **files** the backends wrote, each counted once (an end-to-end trace holding three roles is one
  file), and per-file details from the backend where it offers them (its ``report_details`` hook,
  e.g. rlprof-nsys' NVTX summary);
* the **verdict** (:func:`verdict`): what the plan expected but did not get — a step x role a
  backend wrote nothing for, fewer capture windows than planned, processes that never finalized,
  backend errors, workers the Ray controller lost — and, when nothing was captured at all, why.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from rlprof.analysis.compute import compute_lines
from rlprof.analysis.cost import RLPROF_TIMING, ProfilingCost
from rlprof.analysis.anatomy import Anatomy, RankTime, process_name
from rlprof.analysis.details import add_details
from rlprof.analysis.inside import inside_lines
from rlprof.analysis.overlap import MISSING_NOTE, Overlap
from rlprof.analysis.timeline import DEFAULT_OUTPUT as TIMELINE_DEFAULT
from rlprof.analysis.step_series import series_lines
from rlprof.analysis.rollout_requests import request_lines
from rlprof.analysis.runs import File, RunReport, build_report, build_reports, role_index
from rlprof.analysis.traces import TraceFiles
from rlprof.analysis.verdict import Verdict, problem_lines, verdict, verdict_lines
from rlprof.invocation import rlprof_command
from rlprof.manifest import short_node
from rlprof.sizes import size_text

__all__ = ["RunReport", "Verdict", "add_details", "build_report", "build_reports", "problem_lines", "render",
           "role_index", "size_text", "verdict", "verdict_lines"]

HTML_DEFAULT = "report.html"
"""Where ``--html`` writes without ``-o`` (in the run's directory; ``report.1.html``... when taken)."""
FILES_SHOWN = 24
"""The text report lists this many files, then counts the rest (``--json`` lists all)."""


# ----------------------------------------------------------------------------------- rendering


def render(report: RunReport) -> str:
    """The report as text: header, step anatomy, stragglers, files, verdict."""
    modes = ", ".join(report.modes) or "?"
    tools = ", ".join(report.tools) or "?"
    hosts = sorted({p.host for p in report.processes})
    nodes = {p.node for p in report.processes if p.node}
    status = "ok" if report.ok else "FAILED"
    lines = [f"run {report.run_id}: {status}; mode {modes}; tools {tools}; {len(report.processes)} profiling process{'es' if len(report.processes) != 1 else ''} on "
             f"{len(hosts)} host{'s' if len(hosts) != 1 else ''}" + (f", {len(nodes)} Ray node{'s' if len(nodes) != 1 else ''}" if nodes else "")]
    lines += [f"  {d}" for d in report.run_dirs]
    lines += series_lines(report.series)
    lines += _anatomy_lines(report.anatomy, report.cost, _unplanned(report.captures), report.series.driver_ms())
    lines += inside_lines(report)
    lines += compute_lines(report)
    lines += overlap_lines(report.overlap)
    lines += request_lines(report.requests)
    lines += _file_lines(report.files)
    lines += _cost_lines(report)
    lines += _size_lines(report)
    lines += _node_lines(report)
    lines += _said_lines(report)
    if report.anatomy.has_timings and report.run_dirs:
        run = " ".join(_shown(d) for d in report.run_dirs)  # every node's directory of the run
        rlprof = rlprof_command()  # as this user started it, so the lines run when pasted
        lines.append("")
        # No -o: each command names its file itself and never replaces one (timeline.1.json when pasted again).
        traces = TraceFiles(f.backend for f in report.files)
        if any(traces.is_chrome(f.backend, Path(f.path)) for f in report.files):  # only what the selected backends wrote
            lines.append(f"next: {rlprof} timeline {run} --with-traces   (writes {TIMELINE_DEFAULT} in the run's directory: every rank on one timeline, ui.perfetto.dev)")
        else:
            lines.append(f"next: {rlprof} timeline {run}   (writes {TIMELINE_DEFAULT} in the run's directory: every rank's regions on one timeline, ui.perfetto.dev)")
        lines.append(f"      {rlprof} report {run} --html   (writes {HTML_DEFAULT} in the run's directory: plots of the step anatomy, a rank x region heat map)")
    lines.append("")
    lines.append("verdict:")
    lines += [f"  {line}" for line in verdict_lines(report)]
    lines.append("problems: none" if report.ok else f"problems: {report.problem_count}")
    return "\n".join(lines)


def overlap_lines(overlap: Overlap | None) -> list[str]:
    """Per parameter version of an async run: the trainer's side, then each replica's
    (:mod:`rlprof.analysis.overlap`); nothing for a run without async regions."""
    if overlap is None:
        return []
    lines = ["", "async overlap per parameter version (each process's regions clipped to the version's window; unions, "
                 'not sums; docs/analysis.md, "Async overlap"):']
    rows = [("version", "window_ms", "trainer waited", "updated", "sent", "sent, no replica paused",
             "generated while updating", "weight sync", "staleness", "")]
    for v in overlap.versions:
        t, w = v.trainer, v.window_ms
        stale = v.staleness
        rows.append((str(v.step), f"{w:.1f}", _part(t.wait_ms, w) if t else "-", f"{t.update_ms:.1f}" if t else "-",
                     f"{t.send_ms:.1f}" if t else "-", f"{t.send_beyond_pause_ms:.1f}" if t else "-",
                     f"{v.overlap_ms:.1f} ({_pct(v.overlap_share)})" if v.overlap_share is not None else "-",
                     f"{v.sync_ms:.1f}" if v.sync_ms is not None else "-",
                     f"mean {stale['mean']:.2f}, max {stale['max']} ({stale['samples']} samples)"
                     if stale and stale.get("samples") else "-", ""))
    lines += _table(rows, indent="  ")
    rows = [("version", "replica", "generating", "paused", "held", "other", "between steps", "transport", "load", "resume", "")]
    for v in overlap.versions:
        w = v.window_ms
        for r in v.replicas:
            rows.append((str(v.step), str(r.replica_rank), _part(r.generating_ms, w), _part(r.paused_ms, w), _part(r.held_ms, w),
                         _part(r.other_ms, w), f"{r.between_steps_ms:.1f}", f"{r.transport_ms:.1f}", f"{r.load_ms:.1f}",
                         f"{r.resume_ms:.1f}", ""))
    if len(rows) > 1:
        lines.append("  each replica (ms, % of the window; generating, paused, held and other add up to it, each instant counted in "
                     "the first that covers it; other: the rest, of which between steps: its capture closing and the next "
                     "opening; transport: its pause outside load and resume):")
        lines += _table(rows, indent="  ")
    rows = [("version", "side", "framework's figure", "its window", "rlprof's", "difference", "")]
    for v in overlap.versions:
        for f in v.framework_idle:
            rows.append((str(v.step), f["side"], f"{f['metric']} {f['idle_ratio']:.3f}",
                         f"{f['window_s']:.3f} s" if f["window_s"] is not None else "-",
                         f"{f['rlprof_ratio']:.3f}" if f["rlprof_ratio"] is not None else "-",
                         f"{f['difference'] * 100:+.1f}%" if f["difference"] is not None else "-", ""))
    if len(rows) > 1:
        lines.append("  beside the framework's own idle figures (rlprof's: the trainer's wait as a share of the version's window, "
                     "a replica's time not generating as a share of its own steps (sync to sync); the difference in points; "
                     'docs/analysis.md, "Async overlap", says why they differ):')
        lines += _table(rows, indent="  ")
    if overlap.missing:
        many = len(overlap.missing) != 1
        lines.append(f"  version{'s' if many else ''} {_list(overlap.missing)} {'are' if many else 'is'} not shown: {MISSING_NOTE}")
    return lines


def _part(ms: float, window_ms: float) -> str:
    return f"{ms:.1f} ({_pct(ms / window_ms if window_ms else None)})"


PHASE_GROWN_MS = 5.0
"""A phase of a profiled step this much longer than its unprofiled median is listed under the step's cost."""
PHASES_SHOWN = 4


def _cost_lines(report: RunReport) -> list[str]:
    """Per profiled step, what profiling cost it: what it took beyond the median unprofiled step, by the
    trainer's own timing where it timed every step (:mod:`rlprof.analysis.cost`), with the phases that
    grew and what rlprof's records saw of it (captures being written, waits on a replica's export)."""
    cost = report.cost
    if cost is None or not cost.steps:
        return []
    lines = ["", "profiling cost (what each profiled step took beyond the median unprofiled step):"]
    for s in cost.steps:
        seen = (f"opening {s.opening_ms:.1f} ms + " if s.opening_ms >= 0.05 else "") + f"writing {s.writing_ms:.1f} ms" + (
            f" + waits {s.waits_ms:.1f} ms" if s.waits_ms else "")
        # what the figure measures, said with it: the step's time differs by what each place counts
        measure = (f"from opening its captures to the last one written, {s.timed_by}" if s.timed_by == RLPROF_TIMING
                   else f"the trainer's own step, {s.timed_by}")
        if s.warmup:
            lines.append(f"  step {s.step}: {s.total_ms:.1f} ms ({measure}), the run's warm-up: profiling's cost cannot be "
                         f"told apart from warm-up (rlprof's records saw {seen})")
        elif s.unprofiled_ms is None:
            lines.append(f"  step {s.step}: {s.total_ms:.1f} ms ({measure}), of which profiling at least {s.profiling_ms:.1f} ms "
                         f"({_pct(s.share)}: {seen}; no unprofiled step to compare with)")
        else:
            lines.append(f"  step {s.step}: {s.total_ms:.1f} ms ({measure}) against {s.unprofiled_ms:.1f} ms unprofiled: "
                         f"profiling cost {s.profiling_ms:.1f} ms ({_pct(s.share)}); rlprof's records saw {seen}")
        grown = [p for p in s.phases if p.extra_ms >= PHASE_GROWN_MS][:PHASES_SHOWN]
        if grown:
            lines.append("    its phases that took longer than on unprofiled steps (the trainer's own timing): " +
                         ", ".join(f"{p.name} {p.ms:.1f} ms (unprofiled {p.unprofiled_ms:.1f}, +{p.extra_ms:.1f})"
                                   for p in grown))
    if cost.unprofiled_ms is not None:
        lines.append(f"  unprofiled steps: median {cost.unprofiled_ms:.1f} ms over {cost.unprofiled_count} steps ({cost.timed_by})")
    else:
        lines.append("  unprofiled steps: none recorded (every step was profiled, or an rlprof that did not record them)")
    if cost.unprofiled_waits:
        paid = ", ".join(f"step {step} {ms:.1f} ms" for step, ms in cost.unprofiled_waits.items())
        lines.append(f"  profiling waits paid in unprofiled steps (a replica still writing the last capture): {paid}")
    return lines


def _size_lines(report: RunReport) -> list[str]:
    """Bytes per capture, per role and per process (``capture`` records, as each capture closed), and what
    a budget skipped: where the disk went, and what ``capture_budget_mb``/``run_budget_gb`` left out. A process
    is named as everywhere in the report (``rank 0``, ``replica 0``)."""
    if not report.captures and not report.budget_skipped:
        return []
    names = {(p.host, p.pid): p.name for p in report.processes}

    def name(record: dict) -> str:
        return names.get((record.get("host"), record.get("pid")), f"rank {record['rank']}")

    lines = ["", "bytes written:"]
    by_role: dict[str, int] = {}
    by_process: dict[str, int] = {}
    for c in report.captures:
        roles = c.get("roles") or []
        if len(roles) == 1:  # a capture of one role: that role's bytes
            by_role[roles[0]] = by_role.get(roles[0], 0) + c["bytes"]
        by_process[name(c)] = by_process.get(name(c), 0) + c["bytes"]
    for c in report.captures[:FILES_SHOWN]:
        lines.append(f"  {name(c)} capture {c['capture']} ({', '.join(c.get('roles') or [])}): {size_text(c['bytes'])}")
    if len(report.captures) > FILES_SHOWN:
        lines.append(f"  ... and {len(report.captures) - FILES_SHOWN} more captures (--json lists all)")
    if report.captures:
        shared = sum(1 for c in report.captures if len(c.get("roles") or []) > 1)
        if by_role:
            lines.append("  per role: " + ", ".join(f"{r} {size_text(n)}" for r, n in sorted(by_role.items(), key=lambda i: role_index(i[0])))
                         + (f" (captures of one role; the {shared} holding several roles are not split by role)" if shared else ""))
        else:
            lines.append("  per role: each capture holds every role of its process (end-to-end); discrete mode gives bytes per role")
        order = {p.name: i for i, p in enumerate(report.processes)}
        lines.append("  per process: " + ", ".join(f"{who} {size_text(n)}" for who, n in
                                                   sorted(by_process.items(), key=lambda i: (order.get(i[0], len(order)), i[0]))))
    skipped: dict[tuple, list[int]] = {}
    for s in report.budget_skipped:
        skipped.setdefault((name(s), tuple(s.get("roles") or ()), s["reason"]), []).extend(s.get("steps") or ())
    for (who, roles, reason), steps in skipped.items():
        lines.append(f"  budget skipped: {who} step{'s' if len(steps) != 1 else ''} {', '.join(map(str, steps))} "
                     f"({', '.join(roles)}): {reason}")
    return lines


def _node_lines(report: RunReport) -> list[str]:
    """Nodes the controller lost (their records end at their last step) and files left on their node
    by ``gather: traces``."""
    lines = []
    for n in report.nodes_lost:
        step = f"after step {n['step']}" if n.get("step") else "before any profiled step ended"
        lines.append(f"  node {short_node(n.get('node'))} ({n.get('node_host')}) was LOST {step}: workers "
                     f"{', '.join(n.get('workers') or [])}; their records up to then are above")
    for g in report.not_gathered[:FILES_SHOWN]:
        why = "over gather_budget_gb" if g.get("status") == "over_budget" else f"failed: {g.get('error')}"
        lines.append(f"  not gathered ({why}): {g.get('source')} on node {short_node(g.get('node'))}")
    if len(report.not_gathered) > FILES_SHOWN:
        lines.append(f"  ... and {len(report.not_gathered) - FILES_SHOWN} more not gathered (--json lists all)")
    return ["", "nodes:", *lines] if lines else []


def _said_lines(report: RunReport) -> list[str]:
    """Warnings the core recorded (a colocated Profiler that disagreed with its process's session),
    each once; what backends said (``ctx.warn``, ``ctx.skip``) is in the verdict, beside the captures."""
    said = dict.fromkeys(f"  warning: rank {w['rank']}: {w.get('kind') or 'rlprof'}: {w['message']}"
                         for w in report.warnings if w.get("kind") != "backend")
    return ["", "warnings:", *said] if said else []


STEP_TABLES = 3
"""Up to this many profiled steps get a table each; more are summarised in one table (median per step)."""


def _unplanned(captures: list[dict]) -> dict[int, str]:
    """Step -> why it was captured though no plan named it (the ``reason`` of its ``capture`` records)."""
    return {c["step"]: c["reason"] for c in captures if c.get("reason", "planned") != "planned" and c.get("step") is not None}


def because(reason: str) -> str:
    """A capture's ``reason`` as the report words it: ``captured because step 812 took 2.3x the median ...``,
    ``captured on request r20261127-2101-ab12 (rlprof capture)``."""
    kind, _, what = reason.partition(": ")
    if kind == "triggered":
        return f"captured because {what}"
    if kind == "requested":
        return f"captured on request {what} (rlprof capture)"
    return f"captured: {reason}"


def step_heading(step, driver_ms: float | None, after_ms: float = 0.0) -> str:
    """What a profiled step took, each figure named by what it measures: the driver's step (where known), its
    processes' own steps (the anatomy's window), and profiling's own time at its edges (opening its captures
    before, writing them after)."""
    s = step.spread
    own = (f"its processes' own steps {step.span_ms:.1f} ms, first start to last end over {_count(s.per_rank)} (each: "
           f"median {s.median_ms:.1f}, min {s.min_ms:.1f}, max {s.max_ms:.1f} on {s.slowest.name})")
    edges = [f"opening its captures {step.opening_ms:.1f} ms before"] if step.opening_ms >= 0.05 else []
    edges += [f"writing them {after_ms:.1f} ms after"] if after_ms >= 0.05 else []
    edge = f"; profiling at its edges: {', '.join(edges)}" if edges else ""
    if driver_ms is None:
        return f"step {step.step}: {own}{edge}"
    return f"step {step.step}: {driver_ms:.1f} ms, the driver's step (step_ms above); {own}{edge}"


def _anatomy_lines(anatomy: Anatomy, cost: ProfilingCost | None = None, reasons: dict[int, str] | None = None,
                   driver: dict[int, float] | None = None) -> list[str]:
    reasons, driver = reasons or {}, driver or {}
    paid = {s.step: s for s in cost.steps} if cost is not None else {}
    if len(anatomy.steps) > STEP_TABLES:
        return _summary_lines(anatomy, driver) + [f"step {step}: {because(reason)}" for step, reason in sorted(reasons.items())] \
            + _straggler_lines(anatomy)
    lines: list[str] = []
    for step in anatomy.steps:
        lines.append("")
        after = paid[step.step].writing_ms - step.writing_ms if step.step in paid else 0.0
        if step.spread is None:
            lines.append(f"step {step.step}: no step record (a process stopped inside it)")
        else:
            lines.append(step_heading(step, driver.get(step.step), after))
        if step.step in reasons:
            lines.append(f"  {because(reasons[step.step])}")
        rows = [("region", "procs", "min_ms", "median_ms", "max_ms", "slowest", "share", "")]
        for r in step.regions:
            name = ("  " * r.depth) + r.region
            flags = []
            if r.stragglers:
                flags.append("straggler: " + ", ".join(t.name for t in r.stragglers))
            if r.errors:
                flags.append(f"raised on {len(r.errors)} process{'es' if len(r.errors) != 1 else ''}")
            counts = {t.count for t in r.spread.per_rank}
            if counts != {1}:
                flags.append(f"x{max(counts)} per process")
            spans = sorted({tuple(span) for spans in r.iterations.values() for span in spans})
            if spans:
                flags.append("sampled it " + ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans))
            rows.append((name, str(len(r.spread.per_rank)), f"{r.spread.min_ms:.1f}", f"{r.spread.median_ms:.1f}",
                         f"{r.spread.max_ms:.1f}", r.spread.slowest.name, _pct(r.share_of_step), "; ".join(flags)))
        if (step.writing_ms >= 0.05 or after >= 0.05) and step.span_ms:  # profiling's own time: captures written inside the step
            # the rest was written after the step's window: the same writing, so the two figures never seem to disagree
            note = f"+ {after:.1f} ms after the step's end (profiling cost, below)" if after >= 0.05 else ""
            rows.append(("(writing captures)", "", "", f"{step.writing_ms:.1f}", "", "", _pct(step.writing_ms / step.span_ms), note))
        if step.untracked_ms is not None and step.regions:
            share = step.untracked_ms / step.span_ms if step.span_ms else None
            rows.append(("(outside regions)", "", "", f"{step.untracked_ms:.1f}", "", "", _pct(share), ""))
        lines += _table(rows, indent="  ")
        if step.gaps and step.regions:
            lines.append("    outside regions, largest gaps: " + "; ".join(g.line() for g in step.gaps))
        if step.phases and step.regions:
            lines.append(f"    outside regions, by the driver's phases ({step.phase_source or 'its own timers'}): "
                         + ", ".join(f"{name} {ms:.1f} ms" for name, ms in step.phases))
    return lines + _straggler_lines(anatomy)


def _summary_lines(anatomy: Anatomy, driver: dict[int, float] | None = None) -> list[str]:
    lines = ["", f"{len(anatomy.steps)} profiled steps:"]
    for step in anatomy.steps:
        lines.append("  " + (f"step {step.step}: no step record" if step.spread is None else
                             step_heading(step, (driver or {}).get(step.step))))
    lines.append("")
    lines.append("regions (per process the median over steps, then across processes):")
    rows = [("region", "steps", "min_ms", "median_ms", "max_ms", "slowest", "share", "")]
    for r in anatomy.regions:
        rows.append((("  " * r.depth) + r.region, str(r.steps), f"{r.spread.min_ms:.1f}", f"{r.spread.median_ms:.1f}",
                     f"{r.spread.max_ms:.1f}", r.spread.slowest.name, _pct(r.share_of_step), ""))
    return lines + _table(rows, indent="  ")


def _straggler_lines(anatomy: Anatomy) -> list[str]:
    lines: list[str] = []
    if anatomy.stragglers:
        lines.append("")
        lines.append(f"stragglers ({len(anatomy.stragglers)}):")
        for s in sorted(anatomy.stragglers, key=lambda s: -(s.time.ms - s.median_ms))[:FILES_SHOWN]:
            lines.append(f"  step {s.step} {s.region}: {s.time.name} ({s.time.host}) {s.time.ms:.1f} ms vs the others' median {s.median_ms:.1f} ms (+{s.over_pct:.0f}%)")
        if len(anatomy.stragglers) > FILES_SHOWN:
            lines.append(f"  ... and {len(anatomy.stragglers) - FILES_SHOWN} more (--json lists all)")
    return lines


def _file_lines(files: list[File]) -> list[str]:
    if not files:
        return ["", "files: none"]
    away = sum(1 for f in files if not f.exists and f.node and not f.gathered_from)
    gone = sum(1 for f in files if not f.exists) - away
    lines = ["", f"files ({len(files)}, {size_text(sum(f.size for f in files))}"
                 + (f"; {away} on other nodes" if away else "") + (f"; {gone} no longer on disk" if gone else "") + "):"]
    shown = files[:FILES_SHOWN]
    name_w = max(len(process_name(f.rank, f.replica_rank)) for f in shown)
    backend_w = max(len(f.backend) for f in shown)
    nodes = any(f.node for f in shown)
    for f in shown:
        node = f"node {short_node(f.node)}  " if nodes else ""
        lines.append(f"  {process_name(f.rank, f.replica_rank):<{name_w}}  {f.backend:<{backend_w}}  {size_text(f.size):>10}  {node}{_shown(f.path)}"
                     + ("" if f.exists else _absent(f)))
        lines += [f"      {d}" for d in f.details]
    if len(files) > FILES_SHOWN:
        lines.append(f"  ... and {len(files) - FILES_SHOWN} more (--json lists all)")
    return lines


def _absent(f: File) -> str:
    """Why a listed file is not here: it lives on another node, or it is gone."""
    if f.node and not f.gathered_from:
        return f"  (on node {short_node(f.node)}: not on this machine)"
    return "  (no longer on disk)"


def _table(rows: list[tuple[str, ...]], indent: str) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:-1], widths[1:])]
        out.append((indent + "  ".join(cells) + ("  " + row[-1] if row[-1] else "")).rstrip())
    return out


def _count(times: Sequence[RankTime]) -> str:
    """``2 ranks``, ``2 ranks + 2 replicas``, ``1 replica``."""
    replicas = sum(1 for t in times if t.replica_rank is not None)
    parts = [(len(times) - replicas, "rank"), (replicas, "replica")]
    return " + ".join(f"{n} {word}{'s' if n != 1 else ''}" for n, word in parts if n) or "0 ranks"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _list(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path
