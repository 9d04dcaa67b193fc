"""What a step's rollout requests say: one definition of each figure (docs/analysis.md, "Rollout requests").

Pure functions of :class:`~rlprof.request_records.RequestRecord` lists, computed by the run's driver every
step (:class:`rlprof.runtime.step_book.StepBook`: the tracker, ``step_metrics.jsonl``, the ``rollout_tail``
trigger) and by the report from the records file (the curves it draws): one computation, so the two agree.

Per replica, over the requests it served in the step that have a start (scheduled, else arrival) and an end
(last token):

* the **running-requests curve**: how many requests run at each moment, rebuilt exactly from their intervals
  ``[start, end)`` (a change point per start and end; at one instant ends count before starts), no polling;
* the **generate window**: from the first arrival (else start) to the last end;
* **tokens per second**: the generated tokens over the window;
* **occupancy**: the area under the curve over ``peak x window`` (1: the replica ran its peak batch the whole
  window);
* the **tail**: from the moment the running count falls below half its peak, and stays there, to the last end
  (``tail_s``), and its share of the window (``tail_share``). One request alone has no tail (0).

Across replicas: the **slowest** request (the longest latency, ``end - arrival``; its queue ``scheduled - queued``
(arrival where the engine gives no queue time), prefill ``first token - scheduled``, decode ``last token - first
token``, tokens, replica, id), the **latency** and **length** percentiles (nearest rank: always a value some
request had), the **replica the step waited for** (the latest last end) and the **finish spread** (the latest
replica's last end minus the earliest's).

A figure the records cannot give (a time the engine does not stamp) is absent from :meth:`RequestFigures.metrics`,
never 0. A leaf, beside :mod:`rlprof.step_metrics`, whose naming function it uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from rlprof.request_records import RequestRecord
from rlprof.step_metrics import metric_name

TOPIC = "requests"
"""The second segment of every name: ``rlprof/requests/...``."""
PERCENTILES = (50, 90, 99)
REPLICA_FIGURES = ("tokens_per_s", "occupancy", "tail_s", "tail_share")
"""What each replica says, under ``rlprof/requests/replica<r>/``."""
SLOWEST_FIGURES = ("time_s", "queue_s", "prefill_s", "decode_s", "tokens", "replica")
"""What the slowest request says, under ``rlprof/requests/slowest/``."""


def replica_segment(replica: int) -> str:
    return f"replica{replica}"


# ------------------------------------------------------------------------------------------ one replica


def running(records: Sequence[RequestRecord]) -> list[tuple[int, int]]:
    """The running-requests curve of ``records``: ``(time_ns, count from then on)`` at each change, in time order,
    starting at the first start and ending at the last end (count 0). Records without a start or an end, or
    ending before they start, are not on it."""
    events: list[tuple[int, int]] = []
    for r in records:
        start, end = r.start_ns, r.end_ns
        if start is None or end is None or end < start:
            continue
        events.append((start, 1))
        events.append((end, -1))
    events.sort()  # at one instant -1 sorts before +1: an end counts before a start
    curve: list[tuple[int, int]] = []
    count = 0
    for t, delta in events:
        count += delta
        if curve and curve[-1][0] == t:
            curve[-1] = (t, count)
        else:
            curve.append((t, count))
    return curve


def tail_start(curve: Sequence[tuple[int, int]], peak: int) -> int | None:
    """When the curve falls below half ``peak`` for the last time and stays there to its end; None for no curve."""
    if not curve:
        return None
    start = curve[-1][0]
    for t, count in reversed(curve):
        if 2 * count >= peak:
            break
        start = t
    return start


def area(curve: Sequence[tuple[int, int]]) -> int:
    """Request-nanoseconds under the curve."""
    return sum(curve[i][1] * (curve[i + 1][0] - curve[i][0]) for i in range(len(curve) - 1))


@dataclass(frozen=True)
class ReplicaFigures:
    """One replica's figures in one step (see the module doc)."""

    replica: int
    requests: int
    """Its requests in the step (all of them, also those without times)."""
    window_start_ns: int | None
    window_end_ns: int | None
    peak: int
    """The most requests running at once."""
    tokens: int | None
    """Its generated tokens (None: no request says)."""
    occupancy: float | None
    tail_start_ns: int | None
    tail_s: float | None
    tail_share: float | None
    tokens_per_s: float | None
    curve: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    @property
    def window_s(self) -> float | None:
        if self.window_start_ns is None or self.window_end_ns is None:
            return None
        return (self.window_end_ns - self.window_start_ns) / 1e9

    def metrics(self) -> dict[str, float]:
        segment = replica_segment(self.replica)
        return {metric_name(TOPIC, segment, name): round(value, 6) for name in REPLICA_FIGURES
                if (value := getattr(self, name)) is not None}


def replica_figures(replica: int, records: Sequence[RequestRecord]) -> ReplicaFigures:
    """The figures of ``replica`` from its ``records`` of one step."""
    curve = running(records)
    token_counts = [r.generated_tokens for r in records if r.generated_tokens is not None]
    tokens = sum(token_counts) if token_counts else None
    if not curve:
        return ReplicaFigures(replica, len(records), None, None, 0, tokens, None, None, None, None, None)
    timed = [r for r in records if r.start_ns is not None and r.end_ns is not None and r.end_ns >= r.start_ns]
    begin = min(r.arrival_ns if r.arrival_ns is not None and r.arrival_ns <= r.start_ns else r.start_ns for r in timed)
    end = curve[-1][0]
    peak = max(count for _, count in curve)
    window = end - begin
    occupancy = area(curve) / (peak * window) if window > 0 and peak > 0 else None
    tail_at = tail_start(curve, peak)
    tail_ns = end - tail_at if tail_at is not None else None
    timed_tokens = [r.generated_tokens for r in timed if r.generated_tokens is not None]
    return ReplicaFigures(
        replica, len(records), begin, end, peak, tokens, occupancy, tail_at,
        tail_ns / 1e9 if tail_ns is not None else None,
        tail_ns / window if tail_ns is not None and window > 0 else None,
        sum(timed_tokens) / (window / 1e9) if timed_tokens and window > 0 else None,
        tuple(curve))


# ------------------------------------------------------------------------------------------ the step


def percentile(values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile of ``values`` (the smallest value with at least ``p``% of them at or
    below it); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def latency_ns(r: RequestRecord) -> int | None:
    begin = r.arrival_ns if r.arrival_ns is not None else r.start_ns
    if begin is None or r.end_ns is None:
        return None
    return r.end_ns - begin


def _seconds(a: int | None, b: int | None) -> float | None:
    return (b - a) / 1e9 if a is not None and b is not None else None


@dataclass(frozen=True)
class RequestFigures:
    """One step's request figures (see the module doc)."""

    step: int
    count: int
    replicas: Mapping[int, ReplicaFigures]
    slowest: RequestRecord | None
    """The request with the longest latency."""
    latency_s: Mapping[int, float]
    """Percentile -> seconds (empty: no latency known)."""
    tokens: Mapping[int, int]
    """Percentile -> generated tokens (empty: none known)."""
    waited_for_replica: int | None
    finish_spread_s: float | None

    @property
    def slowest_figures(self) -> dict[str, float | int]:
        """``time_s``, ``queue_s``, ``prefill_s``, ``decode_s``, ``tokens``, ``replica`` of the slowest request
        (those known)."""
        r = self.slowest
        if r is None:
            return {}
        queued = r.queued_ns if r.queued_ns is not None else r.arrival_ns
        latency = latency_ns(r)
        values = {"time_s": latency / 1e9 if latency is not None else None,
                  "queue_s": _seconds(queued, r.scheduled_ns), "prefill_s": _seconds(r.scheduled_ns, r.first_token_ns),
                  "decode_s": _seconds(r.first_token_ns, r.last_token_ns), "tokens": r.generated_tokens,
                  "replica": r.replica}
        return {k: v for k, v in values.items() if v is not None}

    @property
    def tail_share(self) -> float | None:
        """The largest tail share of any replica (what the ``rollout_tail`` trigger reads)."""
        shares = [f.tail_share for f in self.replicas.values() if f.tail_share is not None]
        return max(shares) if shares else None

    def metrics(self) -> dict[str, float | int]:
        """The step's figures under their tracker names (``rlprof/requests/...``)."""
        out: dict[str, float | int] = {metric_name(TOPIC, None, "count"): self.count}
        for name, value in self.slowest_figures.items():
            out[metric_name(TOPIC, "slowest", name)] = round(value, 6) if isinstance(value, float) else value
        if self.waited_for_replica is not None:
            out[metric_name(TOPIC, None, "waited_for_replica")] = self.waited_for_replica
        if self.finish_spread_s is not None:
            out[metric_name(TOPIC, None, "finish_spread_s")] = round(self.finish_spread_s, 6)
        for p, value in self.latency_s.items():
            out[metric_name(TOPIC, "latency_s", f"p{p}")] = round(value, 6)
        for p, value in self.tokens.items():
            out[metric_name(TOPIC, "tokens", f"p{p}")] = value
        for replica in sorted(self.replicas):
            out.update(self.replicas[replica].metrics())
        return out


def request_figures(step: int, records: Sequence[RequestRecord]) -> RequestFigures:
    """The figures of ``step`` from every replica's ``records`` of it."""
    by_replica: dict[int, list[RequestRecord]] = {}
    for r in records:
        by_replica.setdefault(r.replica, []).append(r)
    replicas = {replica: replica_figures(replica, rows) for replica, rows in sorted(by_replica.items())}
    latencies = [(latency, r) for r in records if (latency := latency_ns(r)) is not None]
    slowest = max(latencies, key=lambda item: (item[0], item[1].end_ns or 0, item[1].id))[1] if latencies else None
    token_counts = [r.generated_tokens for r in records if r.generated_tokens is not None]
    ends = {replica: f.window_end_ns for replica, f in replicas.items() if f.window_end_ns is not None}
    waited = max(ends, key=lambda replica: (ends[replica], -replica)) if ends else None
    spread = (max(ends.values()) - min(ends.values())) / 1e9 if ends else None
    return RequestFigures(
        step, len(records), replicas, slowest,
        {p: percentile([lat for lat, _ in latencies], p) / 1e9 for p in PERCENTILES} if latencies else {},
        {p: percentile(token_counts, p) for p in PERCENTILES} if token_counts else {},
        waited, spread)


def names(replicas: Sequence[int]) -> list[str]:
    """Every name a step with ``replicas`` can have (for :func:`rlprof.step_metrics.check_names` and the docs)."""
    out = [metric_name(TOPIC, None, "count"), metric_name(TOPIC, None, "waited_for_replica"),
           metric_name(TOPIC, None, "finish_spread_s")]
    out += [metric_name(TOPIC, "slowest", name) for name in SLOWEST_FIGURES]
    out += [metric_name(TOPIC, group, f"p{p}") for group in ("latency_s", "tokens") for p in PERCENTILES]
    out += [metric_name(TOPIC, replica_segment(r), name) for r in replicas for name in REPLICA_FIGURES]
    return out
