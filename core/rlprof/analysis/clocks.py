"""Ranks on different hosts, put on one clock by the collectives they share.

When: :func:`rlprof.analysis.breakdown.apportion_waits` asks it before it splits a collective into wait
and transfer. Within a host every process stamps its trace with the same wall clock, so arrivals
compare directly. Across hosts the wall clocks differ by whatever NTP left (often well under a
millisecond, sometimes far more), and a wait of a few milliseconds is measured against that.

Why the ends: a collective *starts* at different times on its ranks (that difference is the wait
being measured), but it *ends* on every rank at nearly the same moment, once the last rank's data
has gone round. So the offset of a host is the median, over the collectives it shares with the
reference host, of the difference between the reference host's end and its own; the **residual**
is the median distance of those differences from the offset: how far the aligned clocks still
disagree, said beside every figure that used them.

Hosts are known from rlprof's layout (:func:`rlprof.layout.host_of`); traces from elsewhere are taken
as one host's, as their own clocks say.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from rlprof.layout import host_of


@dataclass(frozen=True)
class HostClock:
    """What to add to one host's wall clock to read it on the reference host's, and how well that holds."""

    host: str
    offset_ms: float
    residual_ms: float | None
    """None: the host shared no collective with the reference host, and was left on its own clock."""
    collectives: int
    """How many collectives the offset rests on."""


def host_clocks(traces: Sequence, *, hosts: Sequence[str | None] | None = None) -> dict[str, HostClock]:
    """Per host of ``traces`` (:class:`~rlprof.analysis.breakdown.TraceEvents` of one group), its
    :class:`HostClock`; empty when they all share one host. The reference is the host of the lowest rank.

    ``hosts`` gives each trace's host (default: read from its path)."""
    named = list(hosts) if hosts is not None else [host_of(trace.path) for trace in traces]
    if len({host for host in named if host is not None}) < 2:
        return {}
    reference = named[min(range(len(traces)), key=lambda i: (named[i] is None, traces[i].rank is None,
                                                            traces[i].rank or 0, traces[i].path))]
    ends: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for trace, host in zip(traces, named):
        for call in trace.collectives:
            ends[(call.name, call.ordinal)][host or ""].append(call.end + trace.clock_ms)
    differences: dict[str, list[float]] = defaultdict(list)
    for by_host in ends.values():
        if reference not in by_host:
            continue
        mine = statistics.median(by_host[reference])
        for host, theirs in by_host.items():
            if host != reference:
                differences[host].append(mine - statistics.median(theirs))
    clocks = {reference: HostClock(reference, 0.0, 0.0, len(ends))}
    for host in {host or "" for host in named} - {reference}:
        seen = differences.get(host, [])
        if not seen:
            clocks[host] = HostClock(host, 0.0, None, 0)
            continue
        offset = statistics.median(seen)
        clocks[host] = HostClock(host, offset, statistics.median(abs(d - offset) for d in seen), len(seen))
    return clocks
