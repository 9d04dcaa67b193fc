"""Step time over every step of a run, with its captures marked: the one series the report lists (text),
gives (``--json``, ``step_series``) and draws (``--html``, a line chart).

Why: a run profiles a few steps of thousands; its step metrics file (:mod:`rlprof.step_metrics`, written
for every step, profiled or not) says how long each step took, so the report can show where the profiled,
requested and triggered steps sit in the whole run, and whether the step that mattered was captured.

Per step:

* ``step_s``: the step's own time (``rlprof/step/time_s``: its driver's window);
* per role, the slowest process's time inside that role's regions: per process the union of its intervals
  in the role's regions (a nested region counts once), then the largest over the processes. Where a step's
  line left its raw timings out (more than 4096), the role's largest region ``slowest_s`` is taken instead
  (a lower bound; the step is listed in ``approximate``).

Per-process files (ranks a plain Profiler ran without a driver to combine them) are read together: each
step's figures are the largest over the files.

Marks: every step some process captured, with why (the ``reason`` of its ``capture`` records:
``planned``, ``requested: <id>``, ``triggered: <sentence>``; absent in a run by an older rlprof: planned).
Its ``kind`` is ``triggered``, ``requested`` or ``profiled`` (planned), the first of those its captures
have; a step the metrics file calls profiled with no capture record is ``profiled``. ``breakdown`` says
whether the report holds that step's breakdown (its per-step table), where a mark links.

A run without a metrics file (an rlprof before step metrics, or ``global_profiler.step_metrics: false``)
has an empty series, and :data:`NO_FILE` says so wherever it would be shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rlprof.intervals import length, union
from rlprof.step_metrics import FILE, PREFIX, STEP, metrics_files, read_step_metrics

KINDS = ("profiled", "requested", "triggered")
"""Why a step was captured, as its mark shows it: planned in ``global_profiler.steps``, asked for with
``rlprof capture``, or by a trigger (``global_profiler.trigger``)."""
NO_FILE = (f"no step metrics in this run ({FILE}): its rlprof predates them, or global_profiler.step_metrics "
           "was off; only the profiled steps are shown")
"""What the report says in place of the series of a run without a metrics file."""


@dataclass(frozen=True)
class Mark:
    """A captured step: its ``kind`` (:data:`KINDS`), the ``reasons`` its capture records give, its captures."""

    step: int
    kind: str
    reasons: tuple[str, ...]
    captures: tuple[str, ...]
    breakdown: bool
    """The report holds this step's breakdown (its profiled step table): where the mark links."""

    @property
    def why(self) -> str:
        """Why it was captured, as the report says it: its reasons (``planned`` said ``profiled (planned)``)."""
        return "; ".join("profiled (planned)" if r == "planned" else r for r in self.reasons)

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, "reasons": list(self.reasons), "captures": list(self.captures),
                "breakdown": self.breakdown}


@dataclass(frozen=True)
class StepSeries:
    """A run's step time over every step (see the module doc); empty ``steps`` when it has no metrics file."""

    files: tuple[str, ...] = ()
    steps: tuple[int, ...] = ()
    step_s: tuple[float | None, ...] = ()
    """The step's own time, per step (None: the line did not say)."""
    roles: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)
    """Role -> its time per step (None: no region of that role in that step), in the canonical role order."""
    approximate: tuple[int, ...] = ()
    """Steps whose role times are the largest region's ``slowest_s`` (their raw timings were left out)."""
    marks: tuple[Mark, ...] = ()

    @property
    def note(self) -> str | None:
        """The one line said instead of the series, or None when there is one."""
        return None if self.steps else NO_FILE

    def as_dict(self) -> dict[str, Any]:
        return {"files": list(self.files), "steps": list(self.steps), "step_s": list(self.step_s),
                "roles": {role: list(values) for role, values in self.roles.items()},
                "approximate": list(self.approximate), "marks": [m.as_dict() for m in self.marks], "note": self.note}


def step_series(run_dirs: Iterable[str | Path], captures: Sequence[Mapping[str, Any]] = (),
                breakdown_steps: Iterable[int] = (), role_order: Any = None) -> StepSeries:
    """The series of the run whose directories are ``run_dirs`` (every node's), its ``capture`` records
    (raw, as read from the manifests), and the steps the report breaks down (``breakdown_steps``).
    ``role_order``: a sort key for role names (default: by name)."""
    files = _files(run_dirs)
    step_s: dict[int, float] = {}
    roles: dict[str, dict[int, float]] = {}
    approximate: set[int] = set()
    profiled: set[int] = set()
    for path in files:
        for record in read_step_metrics(path):
            if record.kind != "step":
                continue
            step = record.step
            if record.profiled:
                profiled.add(step)
            time_s = record.metrics.get(f"{PREFIX}/{STEP}/time_s")
            if isinstance(time_s, (int, float)):
                step_s[step] = max(step_s.get(step, 0.0), float(time_s))
            per_role, exact = _role_times(record.timings, record.metrics)
            if not exact:
                approximate.add(step)
            for role, seconds in per_role.items():
                known = roles.setdefault(role, {})
                known[step] = max(known.get(step, 0.0), seconds)
    steps = sorted(set(step_s) | {s for values in roles.values() for s in values})
    order = sorted(roles, key=role_order) if role_order is not None else sorted(roles)
    return StepSeries(
        files=tuple(str(p) for p in files),
        steps=tuple(steps),
        step_s=tuple(_round(step_s.get(s)) for s in steps),
        roles={role: tuple(_round(roles[role].get(s)) for s in steps) for role in order},
        approximate=tuple(sorted(approximate)),
        marks=_marks(captures, profiled, set(breakdown_steps)) if steps else (),
    )


def _files(run_dirs: Iterable[str | Path]) -> list[Path]:
    """The run's metrics files over its directories: a driver's run file where one wrote it (it holds every
    process), else every process's own."""
    found = [f for d in sorted({str(d) for d in run_dirs}) for f in metrics_files(Path(d))]
    whole = [f for f in found if f.name == FILE]
    return whole or found


def _role_times(timings: Mapping[str, Any], metrics: Mapping[str, Any]) -> tuple[dict[str, float], bool]:
    """Role -> its slowest process's time in the step (seconds), and whether it came from the raw timings."""
    if timings and "left_out" not in timings:
        intervals: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for key, columns in timings.items():
            role = key.split("/", 1)[0]
            try:
                for rank, start, end in zip(columns["rank"], columns["start_s"], columns["end_s"]):
                    intervals.setdefault((role, rank), []).append((float(start), float(end)))
            except (KeyError, TypeError, ValueError):
                continue
        out: dict[str, float] = {}
        for (role, _rank), spans in intervals.items():
            out[role] = max(out.get(role, 0.0), length(union(spans)))
        return out, True
    out = {}
    for name, value in metrics.items():
        parts = name.split("/")
        if len(parts) == 4 and parts[0] == PREFIX and parts[1] != STEP and parts[3] == "slowest_s" and isinstance(value, (int, float)):
            out[parts[1]] = max(out.get(parts[1], 0.0), float(value))
    return out, not out


def _marks(captures: Sequence[Mapping[str, Any]], profiled: set[int], breakdown: set[int]) -> tuple[Mark, ...]:
    reasons: dict[int, list[str]] = {}
    ids: dict[int, list[str]] = {}
    for c in captures:
        steps = c.get("steps") or ([c["step"]] if isinstance(c.get("step"), int) else [])
        reason = c.get("reason") if isinstance(c.get("reason"), str) and c.get("reason") else "planned"
        for step in steps:
            if not isinstance(step, int):
                continue
            if reason not in reasons.setdefault(step, []):
                reasons[step].append(reason)
            if c.get("capture") and c["capture"] not in ids.setdefault(step, []):
                ids[step].append(str(c["capture"]))
    for step in profiled - set(reasons):
        reasons[step] = ["planned"]
    return tuple(Mark(step, _kind(reasons[step]), tuple(reasons[step]), tuple(ids.get(step, ())), step in breakdown)
                 for step in sorted(reasons))


def _kind(reasons: Sequence[str]) -> str:
    for kind in ("triggered", "requested"):
        if any(r.startswith(kind) for r in reasons):
            return kind
    return "profiled"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


# ----------------------------------------------------------------------------------- text


TEXT_ROWS = 24
"""The text report lists every step up to this many; beyond, the marked steps and the slowest."""


def series_lines(series: StepSeries) -> list[str]:
    """The series as the text report's lines (``--json`` gives every value)."""
    if series.note:
        return ["", series.note]
    roles = list(series.roles)
    marks = {m.step: m for m in series.marks}
    lines = ["", f"every step ({len(series.steps)}, from {', '.join(Path(f).name for f in series.files)}; ms, "
                 "each role: its slowest process's time in its regions):"]
    index = {step: i for i, step in enumerate(series.steps)}
    shown = list(series.steps)
    if len(shown) > TEXT_ROWS:
        slowest = sorted(series.steps, key=lambda s: -(series.step_s[index[s]] or 0.0))[:TEXT_ROWS // 2]
        shown = sorted(set(slowest) | set(marks))[:TEXT_ROWS * 2]
        lines.append(f"  {len(shown)} shown: the {len(slowest)} slowest and the captured (--json has every step)")
    rows = [("step", "step_ms", *(f"{r}_ms" for r in roles), "")]
    for step in shown:
        i = index.get(step)
        values = [series.step_s[i] if i is not None else None] + [series.roles[r][i] if i is not None else None for r in roles]
        mark = marks.get(step)
        rows.append((str(step), *("-" if v is None else f"{1e3 * v:.1f}" for v in values),
                     mark.why if mark else ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        cells = [cell.rjust(w) for cell, w in zip(row[:-1], widths)]
        lines.append(("  " + "  ".join(cells) + ("  " + row[-1] if row[-1] else "")).rstrip())
    if series.approximate:
        lines.append(f"  steps {', '.join(map(str, series.approximate))}: role times are the largest region's (the step's raw "
                     "timings were left out)")
    return lines
