"""Ranks on two hosts whose wall clocks disagree: the collectives they share put them on one clock, so a
wait is measured as it happened, and the residual says how well the clocks were aligned."""

from __future__ import annotations

import pytest

from rlprof.analysis.breakdown import COMMUNICATION, COMPUTE, Collective, Region, TraceEvents, apportion_waits, split
from rlprof.analysis.clocks import host_clocks

SKEW_MS = 50.0
"""Host B's wall clock runs 50 ms ahead of host A's."""


def rank_trace(tmp_path, rank: int, host: str, arrivals: list[float], *, skew: float = 0.0) -> TraceEvents:
    """One CPU rank: three allreduces, each ending at 10 ms past its round (what a collective does on every
    rank), entered at ``arrivals`` (true time); its clock reads ``skew`` ms ahead."""
    path = tmp_path / "step1-actor_update" / f"rank{rank}-{host}-{100 + rank}" / "trace.json"
    trace = TraceEvents(path=str(path), rank=rank, device="cpu", group="g", clock_ms=skew,
                        regions=[Region("actor_update", 1, 0.0, 100.0)])
    calls = []
    for ordinal, arrival in enumerate(arrivals):
        start, end = 30.0 * ordinal + arrival, 30.0 * ordinal + 10.0
        trace.add(30.0 * ordinal, start, COMPUTE)
        trace.add(start, end, COMMUNICATION)
        calls.append(Collective("c10d::allreduce_", ordinal, start, end, None))
    trace.collectives = calls
    return trace


def waits(traces):
    pairs = [(trace, split(trace)) for trace in traces]
    apportion_waits(pairs)
    return {trace.rank: next(r for r in rows if r.region == "actor_update") for trace, rows in pairs}


def test_a_skewed_host_clock_is_aligned_on_the_collectives_and_the_wait_measured_as_it_was(tmp_path):
    # rank 0 (host A) enters each allreduce at 2 ms, rank 1 (host B) at 6 ms: rank 0 waits 3 x 4 ms for rank 1
    a = rank_trace(tmp_path, 0, "hostA", [2.0, 2.0, 2.0])
    b = rank_trace(tmp_path, 1, "hostB", [6.0, 6.0, 6.0], skew=SKEW_MS)
    rows = waits([a, b])
    assert rows[0].communication_wait_ms == pytest.approx(12.0)
    assert rows[0].waited_for_rank == 1
    assert rows[1].communication_wait_ms == pytest.approx(0.0)
    assert rows[1].clock_offset_ms == pytest.approx(-SKEW_MS)
    assert rows[0].clock_offset_ms == 0.0
    assert rows[1].clock_residual_ms == pytest.approx(0.0)


def test_without_aligning_the_same_traces_would_blame_the_wrong_rank(tmp_path):
    """The same two ranks taken as one host's (their clocks trusted): host B's lead makes rank 1 look
    last by 50 ms, and rank 0's whole call is counted as waiting. This is what the alignment prevents."""
    a = rank_trace(tmp_path, 0, "hostA", [2.0, 2.0, 2.0])
    b = rank_trace(tmp_path, 1, "hostA", [6.0, 6.0, 6.0], skew=SKEW_MS)  # same host name: no alignment
    rows = waits([a, b])
    assert rows[0].communication_wait_ms == pytest.approx(3 * 8.0)
    assert rows[1].clock_offset_ms is None


def test_the_residual_says_how_far_the_aligned_clocks_still_disagree(tmp_path):
    a = rank_trace(tmp_path, 0, "hostA", [2.0, 2.0, 2.0])
    b = rank_trace(tmp_path, 1, "hostB", [6.0, 6.0, 6.0], skew=SKEW_MS)
    b.collectives[1] = Collective("c10d::allreduce_", 1, b.collectives[1].start, b.collectives[1].end + 0.4, None)
    b.collectives[2] = Collective("c10d::allreduce_", 2, b.collectives[2].start, b.collectives[2].end - 0.2, None)
    clocks = host_clocks([a, b])
    assert clocks["hostB"].offset_ms == pytest.approx(-SKEW_MS)
    assert clocks["hostB"].residual_ms == pytest.approx(0.2)
    assert clocks["hostB"].collectives == 3


def test_one_host_or_traces_from_elsewhere_keep_their_own_clocks(tmp_path):
    a = rank_trace(tmp_path, 0, "hostA", [2.0])
    b = rank_trace(tmp_path, 1, "hostA", [6.0])
    assert host_clocks([a, b]) == {}
    elsewhere = [TraceEvents(path=str(tmp_path / f"t{i}.json"), rank=i, device="cpu") for i in range(2)]
    assert host_clocks(elsewhere) == {}


def test_a_host_that_shares_no_collective_with_the_reference_stays_on_its_own_clock(tmp_path):
    a = rank_trace(tmp_path, 0, "hostA", [2.0])
    b = rank_trace(tmp_path, 1, "hostB", [6.0], skew=SKEW_MS)
    b.collectives = [Collective("c10d::broadcast_", 0, 6.0, 10.0, None)]
    clocks = host_clocks([a, b])
    assert clocks["hostB"] == type(clocks["hostB"])("hostB", 0.0, None, 0)
