"""MFU, and the one rule that keeps it at or below 100%: a figure above is not shown, what is inconsistent is named.

MFU here is a fraction from 0 to 1: FLOPs over (seconds x the peak's FLOP/s) (:mod:`rlprof.peak` says which
peak). rlprof gives it twice for a region: over its **window** (the time the step spent in it: communication,
copies and idle count against the model) and over its **compute** time alone (the union of its compute
kernels; docs/analysis.md, "Inside a region"); the difference is waiting, not slow kernels.

A device cannot pass its peak, so a figure above 100% means one of its three inputs is wrong, and which one
can be told from the others (:func:`inconsistency`):

* **the peak** — the FLOP/s achieved is no more than what a plain matmul loop measured on this device
  (:attr:`~rlprof.peak.Peak.measured_tflops`): the device did it, so the peak divided by is too low
  (a configured or table figure below the device's);
* **the formula** — an analytic figure (tokens x FLOPs per token) above 100% where the trace's own count
  of the same region is not: the formula claims more work than the operators did;
* **the count** — a counted figure (the trace's FLOPs) above what the device measured: the count, or the
  compute time it is divided by, is wrong.

Where no measured peak is known the peak is named (nothing else contradicts it).
"""

from __future__ import annotations

PEAK, FORMULA, COUNT = "peak", "formula", "count"
"""What a figure above 100% says is wrong."""

SLACK = 1.10
"""A rate up to this times the measured peak is taken as the device's (the calibration's own noise)."""


def fraction(flops: float | None, seconds: float | None, tflops: float | None) -> float | None:
    """FLOPs over ``seconds`` at a peak of ``tflops`` TFLOP/s, as a fraction (may pass 1: see :func:`shown`);
    None when any input is unknown or not positive."""
    if flops is None or not seconds or seconds <= 0 or not tflops or tflops <= 0:
        return None
    return flops / seconds / (tflops * 1e12)


def shown(value: float | None) -> float | None:
    """``value`` where it can be true (0 to 1), else None: a figure above 100% is never reported."""
    return value if value is not None and 0.0 <= value <= 1.0 else None


def inconsistency(rate: float, tflops: float | None, measured_tflops: float | None, *, analytic: bool,
                  counted_fraction: float | None = None) -> str | None:
    """What is wrong when ``rate`` (FLOP/s achieved) passes the peak of ``tflops`` (None: nothing is). ``analytic``:
    the FLOPs come from a formula (else from the trace's count); ``counted_fraction``: the trace's own figure for
    the same region over the same time, where there is one."""
    if not tflops or rate <= tflops * 1e12:
        return None
    if measured_tflops is not None and rate <= measured_tflops * 1e12 * SLACK:
        return PEAK
    if analytic:
        if counted_fraction is not None and counted_fraction <= 1.0:
            return FORMULA
        return FORMULA if measured_tflops is not None else PEAK
    return COUNT if measured_tflops is not None else PEAK


def why_not_shown(which: str | None, peak: str | None = None) -> str:
    """The sentence the report gives in place of a figure above 100% (``peak``: the peak as :attr:`Peak.said`
    names it)."""
    said = peak or "the peak"
    return {PEAK: f"above 100%: the peak is inconsistent ({said} is below what this device does)",
            FORMULA: "above 100%: the formula is inconsistent (it claims more FLOPs than the operators did)",
            COUNT: "above 100%: the count is inconsistent (more FLOPs than the device measured it can do)"}.get(
        which or "", "above 100%: not shown")
