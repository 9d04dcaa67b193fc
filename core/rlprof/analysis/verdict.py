"""The verdict on a run: did it capture what its plan expected? Plain sentences, and ``ok``.

``rlprof report`` ends with it, ``rlprof demo`` prints it last (and exits non-zero when it is not
ok), a CI job can call :func:`verdict` directly. ``ok`` is False when nothing was captured (the
lines say why: a backend that cannot capture on that machine, a backend error, no profiled step
reached) or when the plan expected something that is missing: a step x role a backend wrote nothing
for, fewer capture windows than planned, a file cut mid-write, a process that never finalized, a backend error, a worker
the Ray controller lost. A backend that cannot capture on a machine while another one did is said,
but does not fail the run. Profiling's cost (:mod:`rlprof.analysis.cost`) is warned of, in one line that
says where the time went, only where it stands clear of the unprofiled steps' noise
(:mod:`rlprof.analysis.noise`); it never fails the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rlprof.analysis.cost import COST_WARN_SHARE, ProfilingCost, StepCost
from rlprof.analysis.noise import spread, stands_clear
from rlprof.analysis.runs import File, RunReport, build_reports, role_index
from rlprof.sizes import size_text

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
    elif not report.processes and report.armed:  # armed, and no process profiled: what its driver said of it
        lines += list(dict.fromkeys(a['outcome'] for a in report.armed))
    else:
        by_backend: dict[str, list[File]] = {}
        for f in report.files:
            by_backend.setdefault(f.backend, []).append(f)
        for backend, files in sorted(by_backend.items()):
            steps = sorted({s for f in files for s in f.steps})
            ranks = sorted({f.rank for f in files if f.replica_rank is None})
            replicas = sorted({f.replica_rank for f in files if f.replica_rank is not None})
            on = " and ".join(([f"rank{'s' if len(ranks) != 1 else ''} {_list(ranks)}"] if ranks else [])
                              + ([f"replica{'s' if len(replicas) != 1 else ''} {_list(replicas)}"] if replicas else []))
            gone = sum(1 for f in files if not f.exists)
            lines.append(f"captured: {backend} wrote {len(files)} file{'s' if len(files) != 1 else ''} "
                         f"({size_text(sum(f.size for f in files))}) for {_steps(steps) or 'no step (not tied to one)'} "
                         f"on {on}" + (f"; {gone} of them no longer on disk" if gone else ""))
        for u in report.unavailable:
            lines.append(f"not captured on {u['name']} ({u['host']}): {u['backend']}: {'; '.join(u['problems'])}")
    lines += skip_lines(report.skipped, {(p.host, p.pid): p.name for p in report.processes})
    lines += cost_lines(report.cost)
    lines += [f"warning: rank {w['rank']}: {w.get('backend') or w.get('kind')}: {w['message']}"
              for w in report.warnings if w.get("kind") == "backend"]
    if report.anatomy.has_timings:
        steps = report.anatomy.steps
        regions, stragglers = len(report.anatomy.regions), len(report.anatomy.stragglers)
        lines.append(f"timings: {len(steps)} profiled step{'s' if len(steps) != 1 else ''}, "
                     f"{regions} region{'s' if regions != 1 else ''}, {stragglers} straggler flag{'s' if stragglers != 1 else ''}")
    elif report.processes:
        lines.append("timings: none in the manifest (no profiled step completed, or written by an rlprof without step timings)")
    lines += problem_lines(report)
    ok_line = "ok: every profiled step x role x rank produced output" + (
        " or said why not (skipped)" if report.skipped else "")
    if not report.processes and report.armed:
        ok_line = "ok: nothing was planned, and nothing failed"
    lines.append(ok_line if report.ok else
                 f"FAILED: {report.problem_count} problem{'s' if report.problem_count != 1 else ''}")
    return lines


def costly_steps(cost: ProfilingCost | None) -> list[StepCost]:
    """The profiled steps whose profiling cost stands clear of the unprofiled steps' noise
    (:mod:`rlprof.analysis.noise`): it passes their spread by :data:`~rlprof.analysis.cost.COST_WARN_SHARE`
    of the step and by the floor (1 ms, or 1% of the median unprofiled step)."""
    if cost is None:
        return []
    noise = spread(cost.unprofiled_steps_ms)
    return [s for s in cost.steps if s.profiling_ms is not None  # a warm-up step's cost is not told
            and stands_clear(s.profiling_ms, noise, s.total_ms, COST_WARN_SHARE, cost.unprofiled_ms)]


def cost_lines(cost: ProfilingCost | None) -> list[str]:
    """One warning when profiling's cost of a profiled step stands clear of the noise (:func:`costly_steps`):
    the step it took most of, the others' shares, and where the time went, so that a large share on a
    short step reads as what it is."""
    costly = costly_steps(cost)
    if not costly:
        return []
    worst = max(costly, key=lambda s: s.share)
    others = "".join(f"; step {s.step}: {s.share:.0%}" for s in costly if s is not worst)
    line = (f"warning: profiling took {worst.share:.0%} of profiled step {worst.step} "
            f"({worst.profiling_ms:.1f} of {worst.total_ms:.1f} ms{others})")
    if worst.waits_ms > max(worst.writing_ms, worst.opening_ms):
        return [line + ", waiting for a rollout replica still writing its capture (docs/analysis.md, \"The verdict\")"]
    if worst.opening_ms > worst.writing_ms:
        return [line + f", opening its captures before the step ({worst.opening_ms:.1f} ms; the first torch.profiler start "
                "of a process is the slowest) (docs/analysis.md, \"The verdict\")"]
    short = cost.unprofiled_ms is not None and worst.profiling_ms > cost.unprofiled_ms
    return [line + ", closing its captures after the step: that time follows how many events a capture holds, not how "
            "long the step ran" + (f", and is more than a whole unprofiled step ({cost.unprofiled_ms:.1f} ms) here" if short else "")
            + " (docs/analysis.md, \"The verdict\")"]


def _nothing_because(report: RunReport) -> str:
    """Why a run wrote no file at all, from what its processes recorded."""
    unavailable = report.unavailable
    if unavailable:
        reasons = sorted({f"{u['backend']} cannot capture on {u['host']}: {'; '.join(u['problems'])}" for u in unavailable})
        return "; ".join(reasons)
    if report.skipped:
        return "; ".join(dict.fromkeys(f"{s['backend']} skipped its captures: {s['reason']}" for s in report.skipped))
    if report.errors:
        e = report.errors[0]
        return f"the backend failed ({e['backend']} in {e['hook']} on rank {e['rank']}: {e['error']})"
    if not report.anatomy.has_timings:
        return "no profiled step ran (the training stopped before the first profiled step, or steps never reached)"
    return "the backends wrote no file for the profiled steps"


def skip_lines(skipped: list[dict], names: dict[tuple, str] | None = None) -> list[str]:
    """Captures a backend or a budget skipped with a reason (explained, not counted as missing): one line
    per process, backend and reason, naming the captures (or, where none opened, the steps and roles).
    ``names``: ``(host, pid)`` -> the process's name (``replica 0``); else ``rank N``."""
    names = names or {}
    grouped: dict[tuple, tuple[list[str], list[int], list[str]]] = {}
    for s in skipped:
        captures, steps, roles = grouped.setdefault((s["rank"], s.get("host"), s.get("pid"), s["backend"], s["reason"]), ([], [], []))
        if s.get("capture") and s["capture"] not in captures:
            captures.append(s["capture"])
        steps += [n for n in s.get("steps") or () if n not in steps]
        roles += [r for r in s.get("roles") or () if r not in roles]
    lines = []
    for (rank, host, pid, backend, reason), (captures, steps, roles) in grouped.items():
        if captures:
            what = f"capture{'s' if len(captures) != 1 else ''} {', '.join(captures)}"
        elif steps:
            what = f"step{'s' if len(steps) != 1 else ''} {_list(steps)}" + (f" ({', '.join(roles)})" if roles else "")
        else:
            what = "its capture"
        lines.append(f"skipped: {names.get((host, pid), f'rank {rank}')}: {backend} {what}: {reason}")
    return lines


def problem_lines(report: RunReport) -> list[str]:
    lines = []
    grouped: dict[tuple, dict[str, set]] = {}
    for m in report.missing:
        entry = grouped.setdefault((m["name"], m["host"], m["pid"], m["backend"]), {"steps": set(), "roles": set()})
        entry["steps"].add(m["step"])
        entry["roles"].add(m["role"])
    for (name, host, pid, backend), entry in grouped.items():  # report.missing lists processes in order
        steps = ",".join(str(s) for s in sorted(entry["steps"]))
        roles = ",".join(sorted(entry["roles"], key=role_index))
        lines.append(f"missing: {name} ({host} pid {pid}): {backend} wrote nothing for step{'s' if len(entry['steps']) != 1 else ''} "
                     f"{steps} x role{'s' if len(entry['roles']) != 1 else ''} {roles}")
    for s in report.short_captures:
        lines.append(f"missing: {s['name']} ({s['host']} pid {s['pid']}): {s['backend']} wrote {s['captures']} "
                     f"of {s['expected']} expected captures")
    for u in report.unwritten:
        why = (f"could not be written: {u['error']}" if u.get("state") == "failed" else
               "was still being written when the process stopped (killed, or finalize stopped waiting); "
               "no file is under its name")
        lines.append(f"cut: rank {u['rank']} ({u['host']} pid {u['pid']}): {u['backend']} capture {u['capture']}: "
                     f"{u['path']} {why}")
    for p in report.unfinalized:
        lines.append(f"not finalized: {p.label}: no 'finalized' record (the process died, was killed, or is still running)")
    for e in report.errors:
        kind = f" ({e['kind']})" if e.get("kind") else ""
        lines.append(f"backend error{kind}: rank {e['rank']} ({e['host']} pid {e['pid']}): {e['backend']} in {e['hook']}: {e['error']}")
    for f in report.worker_failures:
        step = f" at step {f['step']}" if f.get("step") is not None else ""
        lines.append(f"worker failure: {f['worker']} (rank {f['worker_rank']}) {f['kind']} in {f['call']}{step}: {f['error']}")
    return lines


def _steps(values) -> str:
    """``step 7``, ``steps 1-3,5``; empty for none."""
    values = sorted(values)
    return f"step{'s' if len(values) != 1 else ''} {_list(values)}" if values else ""


def _list(values) -> str:
    """``0,1,2,3,7`` -> ``0-3,7``: runs of three or more consecutive numbers as a range (64 ranks fit a line)."""
    values = sorted(values)
    parts: list[str] = []
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[i - 1] + 1:
            run = values[start:i]
            parts += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(v) for v in run]
            start = i
    return ",".join(parts)


def report_dict(report: RunReport) -> dict:
    """``report --json``'s object for one run: the run's facts with its verdict lines (third, after
    ``run`` and ``ok``). The verdict is read from the facts, so it is added here, above both."""
    facts = report.as_dict()
    return {"run": facts.pop("run"), "ok": facts.pop("ok"), "verdict": verdict_lines(report), **facts}
