"""Issue 48: a step's rollout request figures (rlprof.request_figures), from synthetic intervals whose answer is
known exactly: the running-requests curve, occupancy, the tail and its share, tokens per second, the slowest
request's parts, percentiles, the replica the step waited for and the finish spread; absent, never 0."""

from __future__ import annotations

import pytest

from rlprof.request_figures import names, percentile, replica_figures, request_figures, running, tail_start
from rlprof.request_records import RequestRecord
from rlprof.step_metrics import check_names

S = 1_000_000_000
T0 = 1_700_000_000 * S


def req(i, replica=0, start=0.0, end=1.0, tokens=8, arrival=None, queued=None, first=None, step=3):
    at = lambda s: None if s is None else T0 + int(s * S)
    return RequestRecord(id=f"r{i}", replica=replica, step=step, arrival_ns=at(arrival if arrival is not None else start),
                         queued_ns=at(queued), scheduled_ns=at(start), first_token_ns=at(first), last_token_ns=at(end),
                         prompt_tokens=4, generated_tokens=tokens, finish_reason="length", preemptions=0)


def test_a_batch_that_empties_has_its_curve_tail_and_occupancy_exactly():
    # four requests scheduled together, ending at 1, 2, 3 and 10 s: the last one alone is the tail
    records = [req(0, end=1), req(1, end=2), req(2, end=3), req(3, end=10, tokens=100)]
    f = replica_figures(0, records)
    assert running(records) == [(T0, 4), (T0 + S, 3), (T0 + 2 * S, 2), (T0 + 3 * S, 1), (T0 + 10 * S, 0)]
    assert f.peak == 4
    assert f.tail_start_ns == T0 + 3 * S  # below half the peak (2) from 3 s on, to the last end
    assert f.tail_s == pytest.approx(7.0)
    assert f.tail_share == pytest.approx(0.7)
    assert f.occupancy == pytest.approx((4 + 3 + 2 + 7) / (4 * 10))
    assert f.tokens == 124 and f.tokens_per_s == pytest.approx(12.4)


def test_an_end_and_a_start_at_one_instant_are_no_spike():
    records = [req(0, start=0, end=5), req(1, start=5, end=6)]
    assert running(records) == [(T0, 1), (T0 + 5 * S, 1), (T0 + 6 * S, 0)]
    assert replica_figures(0, records).peak == 1


def test_the_tail_is_the_last_stretch_below_half_the_peak():
    # the count dips below half (at 2 s), comes back (3 s), and falls for good at 8 s
    records = [req(0, end=2), req(1, end=2), req(2, end=2), req(3, end=8), req(4, start=3, end=8), req(5, start=3, end=8),
               req(6, end=9)]
    curve = running(records)
    assert tail_start(curve, max(c for _, c in curve)) == T0 + 8 * S
    assert replica_figures(0, records).tail_s == pytest.approx(1.0)


def test_one_request_has_no_tail():
    f = replica_figures(0, [req(0, start=1, end=4)])
    assert f.tail_s == 0.0 and f.tail_share == 0.0 and f.occupancy == pytest.approx(1.0)


def test_the_window_begins_at_the_first_arrival():
    f = replica_figures(0, [req(0, arrival=0, start=2, end=4)])
    assert f.window_s == pytest.approx(4.0)
    assert f.occupancy == pytest.approx(0.5)  # one request running for 2 of the 4 s


def test_nearest_rank_percentiles_are_values_some_request_had():
    values = list(range(1, 101))
    assert [percentile(values, p) for p in (50, 90, 99)] == [50, 90, 99]
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) is None
    assert percentile([1, 2, 3, 4], 50) == 2


def test_the_slowest_request_and_the_replica_the_step_waited_for():
    records = [req(0, replica=0, end=2), req(1, replica=0, end=3),
               req(2, replica=1, arrival=0, queued=0.5, start=1, first=1.25, end=11, tokens=96),
               req(3, replica=1, end=1)]
    f = request_figures(3, records)
    assert f.slowest.id == "r2"
    assert f.slowest_figures == {"time_s": pytest.approx(11.0), "queue_s": pytest.approx(0.5), "prefill_s": pytest.approx(0.25),
                                 "decode_s": pytest.approx(9.75), "tokens": 96, "replica": 1}
    assert f.waited_for_replica == 1
    assert f.finish_spread_s == pytest.approx(8.0)
    m = f.metrics()
    assert m["rlprof/requests/count"] == 4
    assert m["rlprof/requests/slowest/replica"] == 1 and m["rlprof/requests/slowest/tokens"] == 96
    assert m["rlprof/requests/waited_for_replica"] == 1
    assert m["rlprof/requests/tokens/p50"] == 8 and m["rlprof/requests/tokens/p99"] == 96
    assert m["rlprof/requests/latency_s/p50"] == pytest.approx(2.0)
    assert set(m) <= set(names([0, 1])) and check_names(m) == []


def test_what_the_records_cannot_give_is_absent_never_zero():
    # a source that knows ids and token counts only: no times
    records = [RequestRecord(id="a", replica=0, generated_tokens=5), RequestRecord(id="b", replica=2, generated_tokens=7)]
    m = request_figures(1, records).metrics()
    assert m == {"rlprof/requests/count": 2, "rlprof/requests/tokens/p50": 5, "rlprof/requests/tokens/p90": 7,
                 "rlprof/requests/tokens/p99": 7}
    # scheduled and last token, no queue or first token: no queue_s, prefill_s, decode_s
    only = RequestRecord(id="c", replica=0, scheduled_ns=T0, last_token_ns=T0 + S)
    slowest = request_figures(1, [only]).slowest_figures
    assert slowest == {"time_s": pytest.approx(1.0), "replica": 0}
