"""What the compute achieved, in ``rlprof report`` (text, ``--json``, HTML): per step and region, tokens per second,
FLOP/s and MFU, analytic every step and counted on profiled steps, and a framework's own MFU beside rlprof's.

From two sources (docs/analysis.md, "What the compute achieves"):

* the step metrics file: each step line's ``work`` (:mod:`rlprof.step_work`: the tokens the trainer said, FLOPs by
  a named formula, tokens/s, model TFLOP/s, MFU over the region's window against the peak and against the
  measured peak) and each ``framework`` line (verl's ``perf/mfu/*`` with the peak verl divides by);
* on profiled steps, the traces' rows (:class:`rlprof.analysis.inside.Split`, :mod:`rlprof.analysis.achieved`):
  every process's counted FLOPs added up, MFU over the windows and over the compute times (every process's FLOPs
  over the sum of its time x its peak), the analytic FLOPs beside them with their difference.

Where a framework's MFU differs from rlprof's, :meth:`Framework.why` says where the difference comes from: the
peaks (a factor), the FLOP/s (formula and time, a factor), and on a profiled step the waiting (window against
compute) and the formula (analytic against counted). No MFU above 100% is shown (:mod:`rlprof.mfu`); a note says why.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlprof.mfu import shown
from rlprof.step_metrics import metrics_files, read_step_metrics

FRAMEWORK_REGIONS = {"perf/mfu/actor": "actor_update", "perf/mfu/critic": "critic_update",
                     "perf/mfu/actor_infer": "actor_compute_log_prob"}
"""verl's MFU figures -> the region whose time they describe."""


@dataclass
class RegionCompute:
    """One region in one step (see the module doc); ``counted_*`` only on a profiled step whose traces counted FLOPs."""

    step: int
    region: str
    role: str | None = None
    tokens: int | None = None
    tokens_per_s: float | None = None
    model_tflops: float | None = None
    mfu_window: float | None = None
    mfu_window_measured: float | None = None
    analytic_flops: float | None = None
    formula: str | None = None
    peak: str | None = None
    note: str | None = None
    refused: str | None = None
    counted_flops: float | None = None
    counted_processes: int = 0
    counted_mfu_window: float | None = None
    counted_mfu_compute: float | None = None
    counted_mfu_compute_measured: float | None = None
    counted_note: str | None = None

    @property
    def difference(self) -> float | None:
        """(analytic − counted) / counted: how far the formula is from the operators' own count."""
        if self.analytic_flops is None or not self.counted_flops:
            return None
        return (self.analytic_flops - self.counted_flops) / self.counted_flops

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "difference": self.difference}


@dataclass
class Framework:
    """A framework's own MFU figure of a step beside rlprof's of the same region."""

    step: int
    metric: str
    value: float
    region: str | None
    peak_tflops: float | None
    """The peak the framework divides by (verl's table; None: unknown to it, its MFU then 0)."""
    ours: RegionCompute | None = None
    ours_peak_tflops: float | None = None

    def why(self) -> str:
        """Where rlprof's MFU over the window and the framework's differ (see the module doc)."""
        ours = self.ours
        if ours is None or ours.mfu_window is None:
            return "rlprof has no MFU of this region in this step (its tokens were not said, or no peak is known)"
        parts = []
        if self.peak_tflops is None:
            parts.append("verl knows no peak for this device (its MFU is 0 there)")
        elif self.ours_peak_tflops:
            peaks = self.peak_tflops / self.ours_peak_tflops
            parts.append(f"peaks x{peaks:.3g} (verl divides by {self.peak_tflops:.4g} TFLOP/s, rlprof by {ours.peak})")
            if self.value > 0:
                rate = ours.mfu_window / self.value / peaks
                parts.append(f"FLOP/s x{rate:.3g} (rlprof: {ours.formula} over the region's window; verl: its formula "
                             f"over its own timer)")
        if ours.counted_mfu_compute is not None and ours.counted_mfu_window:
            parts.append(f"over compute time alone (counted) {100 * ours.counted_mfu_compute:.3g}% against "
                         f"{100 * ours.counted_mfu_window:.3g}% over the window: the rest is waiting")
        if ours.difference is not None:
            parts.append(f"analytic FLOPs {100 * ours.difference:+.1f}% from the trace's count")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        ours = self.ours
        return {"step": self.step, "metric": self.metric, "value": self.value, "region": self.region,
                "peak_tflops": self.peak_tflops, "rlprof_mfu_window": ours.mfu_window if ours else None,
                "rlprof_mfu_compute": ours.counted_mfu_compute if ours else None, "why": self.why()}


@dataclass
class Compute:
    regions: list[RegionCompute] = field(default_factory=list)
    framework: list[Framework] = field(default_factory=list)

    @property
    def peaks(self) -> list[str]:
        return sorted({r.peak for r in self.regions if r.peak})

    @property
    def refused(self) -> list[str]:
        return sorted({r.refused for r in self.regions if r.refused})

    def as_dict(self) -> dict[str, Any]:
        return {"peaks": self.peaks, "refused": self.refused, "regions": [r.as_dict() for r in self.regions],
                "framework": [f.as_dict() for f in self.framework]}


def compute_of(run_dirs: Iterable[str], splits: Sequence[Any] = ()) -> Compute:
    """The run's compute figures from its step metrics files (``run_dirs``) and its traces' ``splits``."""
    found: dict[tuple[int, str], RegionCompute] = {}
    framework: list[Framework] = []
    for run_dir in sorted({str(d) for d in run_dirs}):
        for path in metrics_files(Path(run_dir)):
            for record in read_step_metrics(path):
                if record.kind == "step":
                    for key, work in (record.work or {}).items():
                        role, region = key.split("/", 1)
                        _analytic(found.setdefault((record.step, region), RegionCompute(record.step, region, role)), work)
                elif record.kind == "framework":
                    details = record.work or {}
                    for metric, value in record.metrics.items():
                        framework.append(Framework(record.step, metric, float(value), FRAMEWORK_REGIONS.get(metric),
                                                   details.get("peak_tflops")))
    by_key: dict[tuple[int, str], list[Any]] = {}
    for split in splits:
        if getattr(split, "flops", None) is not None and split.step is not None:
            by_key.setdefault((split.step, split.region), []).append(split)
    for key, rows in by_key.items():
        _counted(found.setdefault(key, RegionCompute(*key)), rows)
    peaks = _peak_tflops(found.values())
    for f in framework:
        f.ours = found.get((f.step, f.region)) if f.region else None
        f.ours_peak_tflops = peaks.get((f.step, f.region))
    return Compute(sorted(found.values(), key=lambda r: (r.step, r.region)), framework)


def _analytic(region: RegionCompute, work: dict[str, Any]) -> None:
    for name in ("tokens", "tokens_per_s", "model_tflops", "mfu_window", "mfu_window_measured", "formula", "peak",
                 "note", "refused"):
        setattr(region, name, work.get(name))
    region.analytic_flops = work.get("flops")


def _counted(region: RegionCompute, rows: Sequence[Any]) -> None:
    """Every process's counted FLOPs of the region, and MFU: their FLOPs over the sum of each one's time x peak."""
    region.counted_flops = sum(r.flops for r in rows)
    region.counted_processes = len(rows)
    uncounted = [r.uncounted for r in rows if r.uncounted]
    notes = [r.mfu_note for r in rows if r.mfu_note]
    if uncounted or notes:
        region.counted_note = notes[0]
        return
    for name, time, peak in (("counted_mfu_window", "window_ms", "peak_tflops"),
                             ("counted_mfu_compute", "compute_ms", "peak_tflops"),
                             ("counted_mfu_compute_measured", "compute_ms", "measured_tflops")):
        capacity = sum(getattr(r, time) / 1e3 * (getattr(r, peak) or 0.0) * 1e12 for r in rows)
        if capacity > 0 and all(getattr(r, peak) for r in rows):
            setattr(region, name, shown(region.counted_flops / capacity))
    if region.peak is None:
        region.peak = rows[0].peak_source


def _peak_tflops(regions: Iterable[RegionCompute]) -> dict[tuple[int, str], float]:
    """Each region's peak in TFLOP/s, as its figures divided by (read back from the peak as said)."""
    out = {}
    for r in regions:
        if r.peak and " TFLOP/s" in r.peak:
            try:
                out[(r.step, r.region)] = float(r.peak.split(" TFLOP/s")[0].split()[-1])
            except ValueError:
                continue
    return out


def add_compute(reports: Sequence[Any]) -> None:
    """Set each report's ``compute`` (after :func:`rlprof.analysis.inside.add_inside`, whose splits it reads)."""
    for report in reports:
        splits = report.inside.splits if report.inside is not None else ()
        report.compute = compute_of(report.run_dirs, splits)


# ------------------------------------------------------------------------------------------ text


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.3g}%"


def compute_lines(report: Any) -> list[str]:
    """The report's section: the peaks, per region the median over every step of its analytic figures, per
    profiled step the counted ones beside them, and a framework's MFU beside rlprof's with why they differ."""
    compute = getattr(report, "compute", None)
    if compute is None or not compute.regions:
        return []
    lines = ["", "what the compute achieved (MFU 0-100% of the peak; window: the region's time, compute: its kernels alone):"]
    lines += [f"  peak: {p}" for p in compute.peaks]
    lines += [f"  refused: {r}" for r in compute.refused]
    by_region: dict[str, list[RegionCompute]] = {}
    for r in compute.regions:
        by_region.setdefault(r.region, []).append(r)
    for region, steps in sorted(by_region.items()):
        analytic = [r for r in steps if r.tokens_per_s is not None]
        if analytic:
            median = lambda name: statistics.median([getattr(r, name) for r in analytic if getattr(r, name) is not None] or [0.0])
            mfu = [r.mfu_window for r in analytic if r.mfu_window is not None]
            measured = [r.mfu_window_measured for r in analytic if r.mfu_window_measured is not None]
            beside = (f" (measured peak: {_pct(statistics.median(measured))})"
                      if measured and [r.mfu_window_measured for r in analytic] != [r.mfu_window for r in analytic] else "")
            lines.append(f"  {region}: {median('tokens_per_s'):.4g} tokens/s, {median('model_tflops'):.4g} TFLOP/s per "
                         f"process, MFU over the window {_pct(statistics.median(mfu)) if mfu else '-'}{beside} (median of "
                         f"{len(analytic)} steps; {analytic[0].formula})")
            notes = sorted({r.note for r in analytic if r.note})
            lines += [f"    {note}" for note in notes]
        elif any(r.counted_flops is not None for r in steps):
            lines.append(f"  {region}: no tokens said (profiled steps' counts only)")
        for r in steps:
            if r.counted_flops is None:
                continue
            figures = (f"MFU window {_pct(r.counted_mfu_window)}, compute {_pct(r.counted_mfu_compute)}"
                       + (f" (measured peak: {_pct(r.counted_mfu_compute_measured)})" if r.counted_mfu_compute_measured else "")
                       if r.counted_note is None else r.counted_note)
            beside = f"; analytic {r.analytic_flops:.4g} ({100 * r.difference:+.1f}%)" if r.difference is not None else ""
            lines.append(f"    step {r.step} (profiled): counted {r.counted_flops:.4g} FLOPs over {r.counted_processes} "
                         f"process{'es' if r.counted_processes != 1 else ''}{beside}; {figures}")
    for f in compute.framework:
        ours = _pct(f.ours.mfu_window) if f.ours is not None else "-"
        lines.append(f"  step {f.step}: verl's {f.metric} {f.value:.4g}, rlprof's {ours}: {f.why()}")
    return lines


def compute_html(report: Any) -> str:
    """The section as an HTML table (the report's page)."""
    from html import escape

    compute = getattr(report, "compute", None)
    if compute is None or not compute.regions:
        return ""
    rows = []
    for r in compute.regions:
        rows.append("<tr>" + "".join(f"<td>{escape(str(v))}</td>" for v in (
            r.step, r.region, "-" if r.tokens_per_s is None else f"{r.tokens_per_s:.4g}",
            "-" if r.model_tflops is None else f"{r.model_tflops:.4g}", _pct(r.mfu_window), _pct(r.counted_mfu_window),
            _pct(r.counted_mfu_compute), "-" if r.difference is None else f"{100 * r.difference:+.1f}%",
            r.counted_note or r.note or "")) + "</tr>")
    framework = "".join(f"<li>step {f.step}: verl's {escape(f.metric)} {f.value:.4g}: {escape(f.why())}</li>"
                        for f in compute.framework)
    return ("<h3>What the compute achieved</h3><p>" + escape("; ".join(compute.peaks)) + "</p>"
            "<table class=\"compute\"><tr><th>step</th><th>region</th><th>tokens/s</th><th>TFLOP/s</th>"
            "<th>MFU window (analytic)</th><th>MFU window (counted)</th><th>MFU compute (counted)</th>"
            "<th>analytic vs counted</th><th>note</th></tr>" + "".join(rows) + "</table>"
            + (f"<ul>{framework}</ul>" if framework else ""))


# ------------------------------------------------------------------------------------------ compare


def _median(regions: Iterable[RegionCompute], name: str) -> float | None:
    values = [getattr(r, name) for r in regions if getattr(r, name) is not None]
    return statistics.median(values) if values else None


def compare_lines(a: Any, b: Any) -> list[str]:
    """``rlprof compare``'s lines: per region, each run's median MFU over the window (analytic, every step) and
    over compute (counted, profiled steps), and tokens/s."""
    for report in (a, b):
        if getattr(report, "compute", None) is None:
            add_compute([report])
    regions = sorted({r.region for report in (a, b) for r in report.compute.regions})
    rows = []
    for region in regions:
        sides = [[r for r in report.compute.regions if r.region == region] for report in (a, b)]
        figures = [(_median(s, "tokens_per_s"), _median(s, "mfu_window"), _median(s, "counted_mfu_compute")) for s in sides]
        if any(v is not None for side in figures for v in side):
            rows.append(f"  {region}: tokens/s {_num(figures[0][0])} -> {_num(figures[1][0])}; MFU window "
                        f"{_pct(figures[0][1])} -> {_pct(figures[1][1])}; MFU compute {_pct(figures[0][2])} -> {_pct(figures[1][2])}")
    return ["", "what the compute achieved, A -> B (medians over steps; MFU compute: profiled steps' counted FLOPs):", *rows] if rows else []


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
