"""Each step's analytic FLOPs per role and region: tokens per second, model TFLOP/s and MFU over the window.

Where a framework says how many tokens a region processed (``Profiler.record_tokens``: the demo's workers,
verl's batches through the drop-in), the process appends one :class:`Work` for it (its tokens, its FLOPs by a
named formula of :mod:`rlprof.model_flops`, its device's peak: :mod:`rlprof.peak`); it travels with the
process's timings to the step's driver, which gives it to the step whose window holds it, as a timing.
:func:`work_figures` then says, per (role, region) and step, beside the region's times:

* ``tokens_per_s``: every process's tokens over the slowest process's time in the region (the step waited
  for it): the job's throughput in that region;
* ``model_tflops``: FLOPs over time, per process (every process's FLOPs over the sum of their times): what a
  device achieved, as Megatron's TFLOP/s per GPU;
* ``mfu_window``: the same over the peaks (each process's time x its device's peak), a fraction from 0 to 1;
  never above 1 (:mod:`rlprof.mfu`: the figure is left out, :attr:`WorkFigures.note` names what is inconsistent).

A leaf: written by the drivers (:mod:`rlprof.step_metrics` keeps it in a region's figures), read by the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rlprof.mfu import fraction, inconsistency, shown, why_not_shown
from rlprof.peak import Peak

WORK_FIGURES = ("tokens_per_s", "model_tflops", "mfu_window")
"""What a region of known tokens adds to its step's figures (tracker names: ``rlprof/<role>/<region>/...``)."""


@dataclass(frozen=True)
class WorkFigures:
    """One region's analytic figures in one step (see the module doc)."""

    tokens: int
    flops: float
    tokens_per_s: float | None
    model_tflops: float | None
    mfu_window: float | None
    """None where no peak is known, or the figure passed 100% (:attr:`note`)."""
    formula: str
    peak: str | None
    """The peak divided by, as :attr:`rlprof.peak.Peak.said` names it (several devices: ``; ``-joined)."""
    mfu_window_measured: float | None = None
    """The same against the peak the calibration measured."""
    note: str | None = None
    processes: int = 1
    refused: str | None = None
    """Why a configured peak was not divided by (:attr:`rlprof.peak.Peak.refused`), where one was refused."""

    @property
    def flops_per_token(self) -> float | None:
        return self.flops / self.tokens if self.tokens else None

    def metrics(self) -> dict[str, float]:
        """The figures known, by name (:data:`WORK_FIGURES`)."""
        return {name: getattr(self, name) for name in WORK_FIGURES if getattr(self, name) is not None}

    def as_dict(self) -> dict[str, Any]:
        """The step line's ``work`` entry of the region (docs/analysis.md, "Step metrics")."""
        return {"tokens": self.tokens, "flops": self.flops, "flops_per_token": self.flops_per_token,
                "formula": self.formula, "peak": self.peak, "tokens_per_s": self.tokens_per_s,
                "model_tflops": self.model_tflops, "mfu_window": self.mfu_window,
                "mfu_window_measured": self.mfu_window_measured, "note": self.note, "processes": self.processes,
                "refused": self.refused}


@dataclass(frozen=True)
class Work:
    """One process's tokens in one region, once (``at_ns``: when it was recorded, on the wall clock every process
    shares: what gives it a step)."""

    rank: int
    role: str
    region: str
    at_ns: int
    tokens: int
    flops: float
    formula: str
    peak: Mapping[str, Any] | None = field(default=None, hash=False)
    """The process's :class:`rlprof.peak.Peak` as a dict (None: unknown)."""

    @property
    def start_ns(self) -> int:
        """As a timing's (what a driver gives a step by)."""
        return self.at_ns

    end_ns = start_ns


def work_figures(works: Sequence[Work], times_s: Mapping[int, float]) -> WorkFigures | None:
    """The figures of one region in one step from its ``works`` (every process's) and ``times_s`` (rank -> its time
    in the region); None without work."""
    if not works:
        return None
    tokens: dict[int, int] = {}
    flops: dict[int, float] = {}
    peaks: dict[int, Mapping[str, Any]] = {}
    for w in works:
        tokens[w.rank] = tokens.get(w.rank, 0) + w.tokens
        flops[w.rank] = flops.get(w.rank, 0.0) + w.flops
        if w.peak:
            peaks[w.rank] = w.peak
    timed = [r for r in flops if times_s.get(r, 0.0) > 0]
    slowest = max(times_s.values(), default=0.0)
    total_tokens, total_flops = sum(tokens.values()), sum(flops.values())
    seconds = sum(times_s[r] for r in timed)
    rate = sum(flops[r] for r in timed) / seconds if seconds > 0 else None
    peaked = [r for r in timed if (peaks.get(r) or {}).get("tflops")]
    on_peak = _over_peaks(flops, times_s, peaked, peaks, "tflops")
    measured = [r for r in timed if (peaks.get(r) or {}).get("measured_tflops")]
    on_measured = _over_peaks(flops, times_s, measured, peaks, "measured_tflops")
    note = None
    if on_peak is not None and on_peak > 1.0:
        peak = peaks[peaked[0]]
        note = why_not_shown(inconsistency(rate or 0.0, peak.get("tflops"), peak.get("measured_tflops"), analytic=True),
                             _said(peak))
    elif not peaked:
        note = "no peak known for its device"
    formulas = sorted({w.formula for w in works})
    refused = sorted({p["refused"] for p in peaks.values() if p.get("refused")})
    return WorkFigures(total_tokens, total_flops, total_tokens / slowest if slowest > 0 else None,
                       rate / 1e12 if rate is not None else None, shown(on_peak), "; ".join(formulas),
                       "; ".join(sorted({_said(peaks[r]) for r in peaked})) or None, shown(on_measured), note, len(flops),
                       "; ".join(refused) or None)


def _over_peaks(flops: Mapping[int, float], times_s: Mapping[int, float], ranks: Sequence[int],
                peaks: Mapping[int, Mapping[str, Any]], key: str) -> float | None:
    """Σ FLOPs over Σ (time x peak) of ``ranks`` (each its own device's peak, ``key`` of it)."""
    if not ranks:
        return None
    capacity = sum(times_s[r] * float(peaks[r][key]) for r in ranks)  # TFLOP
    return fraction(sum(flops[r] for r in ranks), 1.0, capacity) if capacity > 0 else None


def _said(peak: Mapping[str, Any]) -> str:
    found = Peak.of(peak)
    return found.said if found is not None else "unknown"
