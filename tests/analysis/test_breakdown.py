"""The breakdown's figures against an independent count: on integer times, a fine grid of unit cells
says for each cell which classes of work cover it; every figure is then a count of cells
(docs/analysis.md, "Inside a region")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlprof import intervals
from rlprof.analysis.breakdown import (COMMUNICATION, COMPUTE, MEMORY, TRACE_REGION, Collective, Region, TraceEvents,
                                       apportion_waits, split)

times = st.integers(0, 60)
event = st.tuples(times, st.integers(1, 15), st.sampled_from([COMPUTE, COMMUNICATION, MEMORY]), times)


def cells(spans, lo, hi):
    return {t for start, end in spans for t in range(max(start, lo), min(end, hi))}


@given(st.lists(st.tuples(times, st.integers(0, 15)), max_size=12), st.lists(st.tuples(times, st.integers(0, 15)), max_size=12))
def test_interval_arithmetic_matches_counting_cells(a, b):
    a = [(s, s + d) for s, d in a]
    b = [(s, s + d) for s, d in b]
    ua, ub = intervals.union(a), intervals.union(b)
    assert intervals.length(ua) == len(cells(a, 0, 100))
    assert intervals.length(intervals.intersection(ua, ub)) == len(cells(a, 0, 100) & cells(b, 0, 100))
    assert intervals.length(intervals.difference(ua, ub)) == len(cells(a, 0, 100) - cells(b, 0, 100))
    assert intervals.length(intervals.clip(ua, 10, 30)) == len(cells(a, 10, 30))


@settings(max_examples=300)
@given(st.lists(event, max_size=25), times, st.integers(0, 40))
def test_a_device_region_splits_as_the_definitions_say(events, region_start, region_len):
    """Device work is what was launched inside the region; memory is the copies' union, exposed memory
    the copies under no kernel; compute + exposed communication + exposed memory + idle = window."""
    trace = TraceEvents(path="t", rank=0, device="cuda", regions=[Region("r", 1, region_start, region_start + region_len)])
    for launch, duration, kind, delay in events:
        trace.add(launch + delay % 5, launch + delay % 5 + duration, kind, launch)
    row = next(r for r in split(trace) if r.region == "r")

    launched = [(l + d % 5, l + d % 5 + dur, k) for l, dur, k, d in events if region_start <= l <= region_start + region_len]
    end = max([region_start + region_len] + [e for _, e, _ in launched])
    of = {k: cells([(s, e) for s, e, kk in launched if kk == k], region_start, end) for k in (COMPUTE, COMMUNICATION, MEMORY)}
    kernels = of[COMPUTE] | of[COMMUNICATION]
    assert row.window_ms == end - region_start
    assert row.compute_ms == len(of[COMPUTE])
    assert row.communication_ms == len(of[COMMUNICATION])
    assert row.overlap_ms == len(of[COMPUTE] & of[COMMUNICATION])
    assert row.exposed_communication_ms == len(of[COMMUNICATION] - of[COMPUTE])
    assert row.memory_ms == len(of[MEMORY])
    assert row.exposed_memory_ms == len(of[MEMORY] - kernels)
    assert row.idle_ms == (end - region_start) - len(kernels | of[MEMORY])
    assert row.compute_ms + row.exposed_communication_ms + row.exposed_memory_ms + row.idle_ms == pytest.approx(row.window_ms)


@settings(max_examples=300)
@given(st.lists(st.tuples(times, st.integers(1, 15), st.booleans()), max_size=25), times, st.integers(0, 40))
def test_a_host_region_splits_its_ops_as_the_definitions_say(ops, region_start, region_len):
    """CPU-only: ops clipped to the region; compute is non-collective ops minus collectives."""
    region_end = region_start + region_len
    trace = TraceEvents(path="t", rank=0, device="cpu", regions=[Region("r", 1, region_start, region_end)])
    for start, duration, collective in ops:
        trace.add(start, start + duration, COMMUNICATION if collective else COMPUTE)
    row = next(r for r in split(trace) if r.region == "r")
    comm = cells([(s, s + d) for s, d, c in ops if c], region_start, region_end)
    other = cells([(s, s + d) for s, d, c in ops if not c], region_start, region_end)
    assert (row.window_ms, row.communication_ms, row.compute_ms) == (region_len, len(comm), len(other - comm))
    assert row.idle_ms == region_len - len(comm | other)
    assert row.memory_ms == row.exposed_memory_ms == 0
    assert row.compute_ms + row.exposed_communication_ms + row.exposed_memory_ms + row.idle_ms == pytest.approx(row.window_ms)


def test_the_worked_example_of_the_docs():
    """docs/analysis.md's example, by hand: a region 0-10 ms; compute 1-5 and 4-7, an all-reduce 6-9,
    a copy 2-3 (under compute: memory, not exposed) and a copy 9-10 (exposed); one kernel launched at 11 (after the region) is not its work."""
    trace = TraceEvents(path="t", rank=0, device="cuda", regions=[Region("actor_update", 1, 0, 10)])
    for start, end, kind in ((1, 5, COMPUTE), (4, 7, COMPUTE), (6, 9, COMMUNICATION), (2, 3, MEMORY), (9, 10, MEMORY)):
        trace.add(start, end, kind, start - 0.5)
    trace.add(12, 13, COMPUTE, 11)
    row, whole = split(trace)
    assert (row.window_ms, row.compute_ms, row.communication_ms, row.overlap_ms, row.exposed_communication_ms,
            row.memory_ms, row.exposed_memory_ms, row.idle_ms) == (10, 6, 3, 1, 2, 2, 1, 1)
    assert (whole.region, whole.window_ms, whole.compute_ms) == (TRACE_REGION, 12, 7)

    peer = TraceEvents(path="p", rank=1, device="cuda", group="job", regions=[Region("actor_update", 1, 0, 10)])
    peer.add(8, 9, COMMUNICATION, 7.5)
    trace.group = "job"
    trace.collectives.append(Collective("ncclDevKernel_AllReduce", 0, 6, 9, 5.5))
    peer.collectives.append(Collective("ncclDevKernel_AllReduce", 0, 8, 9, 7.5))
    apportion_waits([(trace, [row, whole]), (peer, split(peer))])
    assert (row.communication_wait_ms, row.communication_transfer_ms, row.waited_for_rank) == (2, 1, 1)


def test_a_late_rank_makes_the_others_wait_and_is_named():
    """Rank 1 enters the all-reduce at 2 ms, rank 0 at 5 ms; both finish at 8: rank 1 waited 3 ms for rank 0."""
    traces = []
    for rank, start in ((0, 5.0), (1, 2.0)):
        trace = TraceEvents(path=f"r{rank}", rank=rank, device="cpu", group="g", regions=[Region("actor_update", 1, 0, 10)])
        trace.add(start, 8.0, COMMUNICATION)
        trace.collectives.append(Collective("c10d::allreduce_", 0, start, 8.0, None))
        traces.append((trace, split(trace)))
    apportion_waits(traces)
    late, waiting = (rows[0] for _, rows in traces)
    assert (waiting.communication_wait_ms, waiting.communication_transfer_ms, waiting.waited_for_rank) == (3.0, 3.0, 0)
    assert (late.communication_wait_ms, late.communication_transfer_ms, late.waited_for_rank) == (0.0, 3.0, None)


def test_a_trace_alone_has_no_wait_figures():
    trace = TraceEvents(path="t", rank=0, device="cpu", group="g", regions=[Region("r", 1, 0, 10)])
    trace.add(1, 2, COMMUNICATION)
    rows = split(trace)
    apportion_waits([(trace, rows)])
    assert rows[0].communication_wait_ms is None


def test_the_last_rank_to_arrive_waits_for_nobody_whatever_its_clock():
    """Each trace's times are relative to its own first event, with ``clock_ms`` (epoch ms) added back to
    compare ranks. The last rank's own start, shifted to that clock and back, can come back a rounding
    error later than itself: that must not be a wait, let alone a wait for itself."""
    from rlprof.analysis.breakdown import Collective, TraceEvents, _waits

    early = TraceEvents(path="a", rank=0, device="cpu", group="g", clock_ms=1795636077134.3643 - 100)
    late = TraceEvents(path="b", rank=1, device="cpu", group="g", clock_ms=1795636077134.3643)
    early.collectives = [Collective("gloo:all_reduce", 0, 10.123456789, 600.0, None)]
    late.collectives = [Collective("gloo:all_reduce", 0, 84.74337369372327, 90.0, None)]  # (s + c) - c > s here
    waits_early, waits_late = _waits([early, late], [early.clock_ms, late.clock_ms])
    assert waits_late == []
    [wait] = waits_early
    assert wait.late_rank == 1
    assert (wait.start, wait.end) == pytest.approx((10.123456789, 184.74337369372327))
