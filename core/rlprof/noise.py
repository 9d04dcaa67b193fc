"""When a difference stands clear of a run's own noise: the one rule behind every flag the analysis raises,
and behind the late rank of the step metrics (:mod:`rlprof.step_metrics`).

Who asks: ``rlprof compare`` (a region clearly slower or faster in run B), the anatomy (a straggling
process), the split inside regions (a skew between processes) and the verdict (what profiling cost a
step). docs/analysis.md, "Noise", says the same for users.

A run measures the same thing several times: a region on every process and in every profiled step, a
step with and without profiling. Those measurements differ when nothing differs: other jobs on the
machine, the scheduler, caches. On the shared 2-core development VM a demo region ranged over 2-3x
from step to step within one run, and two runs of the same code differed by up to 3.5x in a region's
median. A flag that ignores this cries wolf: the default demo flagged 2 ms regions as stragglers and
"idle skew 166%", and ``compare`` called rows of identical runs clearly slower. So a difference, an
**excess** over its reference, is flagged only when

    excess > noise + max(margin x reference, floor)

* the **noise** is the :func:`spread` (max - min) of the run's own repeated measurements of that
  quantity where nothing should differ, over the profiled steps: for ``compare``, the widest step-to-step
  range of any process's time in either run; for a straggler or a skew, a difference between processes,
  that of the other processes' deviations from each other (:func:`between_processes`); for profiling's
  cost, the unprofiled steps' times;
* the **relative margin** is what a difference must add beyond the noise to be worth saying, as a share of
  its reference: ``--straggler-pct`` (25%) of the other processes' median for a straggler, :data:`MARGIN`
  (5%) for ``compare`` (of A's time) and a skew, 20% of the step for profiling's cost;
* the **absolute margin** (:func:`floor_ms`): :data:`FLOOR_MS`, or :data:`FLOOR_SHARE` of the step's
  median time where that is larger: timer and scheduling jitter that a spread of few samples does not
  show, and differences too small to matter beside the step.

With a single measurement the noise is 0 and only the margins hold.
"""

from __future__ import annotations

import statistics
from typing import Hashable, Iterable, Mapping, TypeVar

P = TypeVar("P", bound=Hashable)
"""A process, as the caller keys it."""

MARGIN = 0.05
"""The relative margin where no other is given: a difference of 5% of its reference beyond the noise
(msprof-analyze flags skews above 5%)."""

FLOOR_MS = 1.0
"""The absolute margin: a difference must pass the noise by at least 1 ms..."""

FLOOR_SHARE = 0.01
"""...and by at least 1% of the step's median time."""


def spread(values: Iterable[float]) -> float:
    """How much repeated measurements of one quantity vary: max - min (0 for fewer than two)."""
    values = list(values)
    return max(values) - min(values) if len(values) > 1 else 0.0


def floor_ms(step_ms: float | None = None) -> float:
    """The absolute margin: :data:`FLOOR_MS`, or :data:`FLOOR_SHARE` of ``step_ms`` where that is larger."""
    return max(FLOOR_MS, FLOOR_SHARE * step_ms) if step_ms else FLOOR_MS


def bar_ms(noise_ms: float, reference_ms: float, margin: float = MARGIN, step_ms: float | None = None) -> float:
    """How far past its reference a value must be to stand clear: ``noise_ms`` plus the larger of
    ``margin`` of ``reference_ms`` and :func:`floor_ms` of the step (module docstring)."""
    return noise_ms + max(margin * max(reference_ms, 0.0), floor_ms(step_ms))


def stands_clear(excess_ms: float, noise_ms: float, reference_ms: float, margin: float = MARGIN,
                 step_ms: float | None = None) -> bool:
    """Whether ``excess_ms`` (a value minus its reference) passes ``noise_ms`` by both margins (:func:`bar_ms`)."""
    return excess_ms > bar_ms(noise_ms, reference_ms, margin, step_ms)


def others_medians(values: Mapping[P, float]) -> dict[P, float]:
    """For each process, the median of the *other* processes' values (its own left out: a straggler does
    not pull up what it is measured against; with two processes it is the other one's). One sort, then
    each in constant time: runs have thousands of processes."""
    order = sorted(values, key=values.__getitem__)
    ranked = [values[p] for p in order]
    others = len(ranked) - 1

    def kth(k: int, left_out: int) -> float:
        return ranked[k] if k < left_out else ranked[k + 1]

    if others < 1:
        return {}
    half = others // 2
    return {p: kth(half, i) if others % 2 else (kth(half - 1, i) + kth(half, i)) / 2 for i, p in enumerate(order)}


def between_processes(steps: Iterable[Mapping[P, float]]) -> dict[P, float]:
    """The noise of a difference between processes: for each process, the widest step-to-step range of
    any *other* process's deviation from the others' median in the same step (0 with one step).

    ``steps``: per profiled step, each process's value (its time in a region, or a part of it). The
    deviation leaves out what moves every process alike, the first step's warm-up or the machine's load,
    which is no difference between processes; the process judged is left out, so a process slow in one
    step does not hide itself. With two processes each one's deviation mirrors the other's: a process
    slower in every step stands clear, one slower in a single step does not (with more processes, it can)."""
    deviations: dict[P, list[float]] = {}
    for values in steps:
        for p, median in others_medians(values).items():
            deviations.setdefault(p, []).append(values[p] - median)
    ranges = sorted(((spread(d), p) for p, d in deviations.items()), key=lambda r: -r[0])
    if not ranges:
        return {}
    (widest, first), second = ranges[0], ranges[1][0] if len(ranges) > 1 else 0.0
    return {p: second if p == first else widest for p in deviations}
