"""Issue 48: the rollout's requests in the report, from a run's step metrics and records files written by the real
StepBook (synthetic requests with a planted tail): the text lists each step's figures, --json gives them all, the
HTML draws each replica's running requests with its tail, the timeline has a counter and a slice per request, and
compare gets noise-aware tail rows."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from rlprof.analysis.compare import SLOWER, told
from rlprof.analysis.rollout_requests import (SLOWEST_ROW, TAIL_ROW, add_request_curves, request_lines, request_samples,
                                              run_requests)
from rlprof.analysis.rollout_requests_html import requests_section, timeline_events
from rlprof.request_records import RequestRecord, read_run
from rlprof.runtime.step_book import StepBook
from rlprof.runtime.step_timings import Batch

S = 1_000_000_000
MS = 1_000_000


def planted_run(tmp_path, steps=4, tail_ms=500, per_replica=8):
    """A run whose replica 1 has one request ``tail_ms`` long each step, every other request 10-80 ms."""
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", None, root=tmp_path)
    t0 = time.time_ns() - 1000 * S
    records = []
    for step in range(1, steps + 1):
        start = t0 + step * 10 * S
        book.began(step, start)
        book.ended(step, start + 5 * S)
        for replica in (0, 1):
            for i in range(per_replica):
                end = start + (tail_ms if (replica, i) == (1, 0) else 10 * (i + 1)) * MS
                records.append(RequestRecord(f"s{step}-r{replica}-{i}", replica, step, start, start, start, start + MS, end, 4,
                                             500 if (replica, i) == (1, 0) else i + 1, "length", 0))
    book.receive(Batch("run", "replicas", 0, [], [], t0 + 100 * S, requests=records))
    book.close()
    return tmp_path


def test_the_report_lists_each_steps_figures_and_the_bytes_per_request(tmp_path):
    requests = run_requests([planted_run(tmp_path)])
    assert [s.step for s in requests.steps] == [1, 2, 3, 4] and requests.requests == 64 and requests.stored == 64
    assert requests.bytes_per_request == pytest.approx((tmp_path / "rollout_requests.jsonl.gz").stat().st_size / 64)
    text = "\n".join(request_lines(requests))
    assert "rollout requests: 64 in 4 steps, replicas 0, 1; records" in text and "B each (64 stored" in text
    row = next(line for line in text.splitlines() if line.strip().startswith("2 "))
    assert row.split()[:5] == ["2", "16", "0.500", "1", "500"]  # step, requests, slowest s, its replica, tokens
    assert "r1 0.440 (88%)" in row  # replica 1: 3 of its 8 running (below half) from 60 ms, to its last end at 500 ms
    assert requests.as_dict()["steps"][0]["metrics"]["rlprof/requests/waited_for_replica"] == 1


def test_the_html_draws_each_replicas_running_requests_with_its_tail(tmp_path):
    run = planted_run(tmp_path)
    report = SimpleNamespace(run_dirs=[str(run)], requests=run_requests([run]))
    add_request_curves([report])
    assert report.requests.slowest_ids == {step: f"s{step}-r1-0" for step in report.requests.curves}
    page = requests_section(report)
    assert page.count('class="running-requests"') == len(report.requests.drawn()) >= 1
    assert page.count('<rect class="tail" data-replica="1"') == len(report.requests.drawn())
    assert "slowest request: <code>s" in page and "tail share per step" in page


def test_the_timeline_has_a_counter_and_one_slice_per_request_in_its_lane(tmp_path):
    run = planted_run(tmp_path, steps=1)
    parts = {step: part.records for step, part in read_run(run).items()}
    origin = min(r.arrival_ns for r in parts[1])
    events = list(timeline_events(parts, {0: 5, 1: 6}, origin, 500))
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 16 and {e["pid"] for e in slices} == {5, 6}
    long = next(e for e in slices if e["name"] == "request s1-r1-0")
    assert long["dur"] == pytest.approx(500_000, abs=1) and long["args"]["generated_tokens"] == 500
    lanes = {}
    for e in slices:  # requests on one lane never overlap
        lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in lanes.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    counter = [e["args"]["running"] for e in events if e["ph"] == "C" and e["pid"] == 6]
    assert counter[0] == 8 and counter[-1] == 0


def test_compare_sees_a_longer_tail_clearly_and_the_same_one_as_noise(tmp_path):
    a = run_requests([planted_run(tmp_path / "a", steps=12, tail_ms=300)])
    b = run_requests([planted_run(tmp_path / "b", steps=12, tail_ms=900)])
    same = run_requests([planted_run(tmp_path / "c", steps=12, tail_ms=300)])
    sa, sb, sc = (request_samples(x, per_rank=False) for x in (a, b, same))
    assert len(sa[TAIL_ROW, (None, None)][0]) == 11  # the first step is the warm-up
    assert told(sa[TAIL_ROW, (None, None)][0], sb[TAIL_ROW, (None, None)][0]) == SLOWER
    assert told(sa[SLOWEST_ROW, (None, None)][0], sb[SLOWEST_ROW, (None, None)][0]) == SLOWER
    assert told(sa[TAIL_ROW, (None, None)][0], sc[TAIL_ROW, (None, None)][0]) != SLOWER
    assert (TAIL_ROW, (None, 1)) in request_samples(a, per_rank=True)


@pytest.mark.slow
def test_the_default_demo_records_its_own_rollout_every_step(demo_run, tmp_path):
    """The hybrid demo (shared six-step run): each worker's batched generate is 16 requests of 8 tokens a step, on
    the run's clock inside that worker's rollout_generate, shown by the report and the timeline."""
    import json

    from demo_runs import SIX_STEPS, cli

    run = demo_run("six", *SIX_STEPS)
    requests = run_requests([run])
    assert [s.step for s in requests.steps] == list(range(1, 8)) and requests.requests == 7 * 32 == requests.stored
    for step, part in read_run(run).items():
        assert sorted({r.replica for r in part.records}) == [0, 1] and {r.generated_tokens for r in part.records} == {8}
    assert "rollout requests: 224 in 7 steps, replicas 0, 1" in cli("report", run).stdout
    out = tmp_path / "timeline.json"
    assert cli("timeline", run, "-o", out).returncode == 0
    events = json.loads(out.read_text())["traceEvents"]
    regions = [e for e in events if e.get("name") == "rollout_generate" and e.get("ph") == "X"]
    slices = [e for e in events if e.get("cat") == "rlprof.request" and e.get("ph") == "X"]
    assert len(slices) == 6 * 32  # the profiled steps', on each worker's process
    for s in slices:
        assert any(r["pid"] == s["pid"] and r["ts"] - 1000 <= s["ts"] and s["ts"] + s["dur"] <= r["ts"] + r["dur"] + 1000
                   for r in regions), s
