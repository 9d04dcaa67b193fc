"""What a region's compute achieved, from its trace: counted FLOPs, FLOP/s over its window and its compute, MFU.

The breakdown's row (:class:`rlprof.analysis.breakdown.Row`) holds a region's counted FLOPs (``flops``: the
operators of :mod:`rlprof.analysis.op_flops` that started inside it), the operators no formula counts
(``uncounted``) and the peak its capture recorded (``peak_tflops``, ``measured_tflops``, ``peak_source``:
:mod:`rlprof.peak`). :func:`derive` fills the figures that follow from those and the row's times, again
whenever rows are added up (a region that ran twice):

* ``flops_per_s_window`` = flops / window, ``flops_per_s_compute`` = flops / compute (the union of its
  compute kernels): the second is never below the first, and the gap is the region's waiting;
* ``mfu_window``, ``mfu_compute``: those over the peak; ``mfu_compute_measured`` over the measured peak;
* ``mfu_note``, where an MFU is not given, why: the capture counted nothing (``flops`` null: no note), a
  compute operator no formula counts ran in it (its MFU would be too low for no fault of the kernels), no
  counted operator ran in its compute, no peak is known, or the figure passed 100% (:mod:`rlprof.mfu` names
  what is inconsistent).

The trace-side half of docs/analysis.md, "What the compute achieves"; the analytic half (tokens x FLOPs per
token, every step) is :mod:`rlprof.model_flops`.
"""

from __future__ import annotations

from typing import Any, Iterable

import bisect

from rlprof.mfu import fraction, inconsistency, shown, why_not_shown
from rlprof.peak import Peak

DERIVED = ("flops_per_s_window", "flops_per_s_compute", "mfu_window", "mfu_compute", "mfu_compute_measured", "mfu_note")
"""The columns :func:`derive` writes (their ``merge`` is ``derived``: worked out again, never added)."""


def derive(row: Any) -> None:
    """Fill ``row``'s :data:`DERIVED` columns from its ``flops``, times and peak (see the module doc)."""
    for name in DERIVED:
        setattr(row, name, None)
    flops = row.flops
    if flops is None:
        return
    window_s, compute_s = row.window_ms / 1e3, row.compute_ms / 1e3
    row.flops_per_s_window = flops / window_s if window_s > 0 else None
    row.flops_per_s_compute = flops / compute_s if compute_s > 0 else None
    if row.uncounted:
        row.mfu_note = f"compute no formula counts ran in it ({row.uncounted}): its FLOPs are a lower bound"
        return
    if flops <= 0 and row.compute_ms > 0:
        row.mfu_note = "no operator whose FLOPs are counted ran in its compute"
        return
    if not row.peak_tflops:
        row.mfu_note = "no peak known for its device"
        return
    on_window, on_compute = fraction(flops, window_s, row.peak_tflops), fraction(flops, compute_s, row.peak_tflops)
    if on_compute is not None and on_compute > 1.0:
        wrong = inconsistency(row.flops_per_s_compute, row.peak_tflops, row.measured_tflops, analytic=False)
        row.mfu_note = why_not_shown(wrong, row.peak_source)
    row.mfu_window, row.mfu_compute = shown(on_window), shown(on_compute)
    row.mfu_compute_measured = shown(fraction(flops, compute_s, row.measured_tflops))


def names(values: Iterable[str | None]) -> str | None:
    """Operator names as one cell: ``aten::a, aten::b`` (each once, in order), None for none."""
    seen = list(dict.fromkeys(n for value in values if value for n in value.split(", ")))
    return ", ".join(seen) or None


def counted(trace: Any, start: float, end: float) -> dict[str, Any]:
    """The FLOP columns of a region of ``trace`` (:class:`~rlprof.analysis.breakdown.TraceEvents`) from ``start`` to
    ``end`` (host time): the counted operators and the uncounted ones that began in it, the capture's peak; nothing
    where the capture counted no FLOPs."""
    if trace.flop_starts is None:
        return {}
    first, last = bisect.bisect_left(trace.flop_starts, start), bisect.bisect_right(trace.flop_starts, end)
    peak = Peak.of(trace.peak)
    return {"flops": float(sum(trace.flop_counts[first:last])), "uncounted": names(n for at, n in trace.uncounted if start <= at <= end),
            "peak_tflops": peak.tflops if peak else None, "measured_tflops": peak.measured_tflops if peak else None,
            "peak_source": peak.said if peak else None}
