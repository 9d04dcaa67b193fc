"""A region's counted FLOPs and its device's peak, from its trace: the columns :func:`rlprof.row_model.derive` makes
FLOP/s and MFU of (docs/analysis.md, "What the compute achieves").

The row's ``flops`` are the operators of :mod:`rlprof.analysis.op_flops` that started inside the region, its
``uncounted`` the compute operators no formula counts that ran in it, its peak what its capture recorded
(:mod:`rlprof.peak`). The analytic half (tokens x FLOPs per token, every step) is :mod:`rlprof.model_flops`.
"""

from __future__ import annotations

import bisect
from typing import Any

from rlprof.peak import Peak
from rlprof.row_model import names


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
