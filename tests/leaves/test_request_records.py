"""Issue 48: the request record and its file (rlprof.request_records): columns read back as written (times to the
microsecond), one gzip member a step, a member cut short ends the reading and nothing else, the budget leaves a
step's records out and says how many; an engine's monotonic clock mapped once and checked."""

from __future__ import annotations

import time

from rlprof.request_records import (EngineClock, RecordFile, RequestRecord, from_columns, read_file, read_run,
                                    record_files, to_columns)

S = 1_000_000_000
T0 = 1_700_000_000 * S


def records(n, step=1, replica=0):
    return [RequestRecord(id=f"{step}-{i}", replica=replica + i % 2, step=step, arrival_ns=T0 + i * 1000,
                          queued_ns=T0 + i * 1000 + 10_000, scheduled_ns=T0 + i * 1000 + 20_000,
                          first_token_ns=T0 + i * 1000 + 500_000, last_token_ns=T0 + (i + 1) * 10_000_000 + 123,
                          prompt_tokens=4, generated_tokens=8 + i, finish_reason="length", preemptions=i % 3)
            for i in range(n)]


def test_columns_read_back_as_written_to_the_microsecond():
    rows = records(5) + [RequestRecord(id="bare", replica=3, step=1)]
    columns = to_columns(rows, T0)
    assert "tool_s" not in columns and "arrival_us" in columns  # a column no record has is left out
    back = from_columns(columns, T0, 1, len(rows))
    for a, b in zip(rows, back):
        for name in ("id", "replica", "step", "prompt_tokens", "generated_tokens", "finish_reason", "preemptions"):
            assert getattr(a, name) == getattr(b, name)
        for name in ("arrival_ns", "queued_ns", "scheduled_ns", "first_token_ns", "last_token_ns"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or abs(x - y) <= 500
    assert back[-1].arrival_ns is None and back[-1].generated_tokens is None


def test_a_step_a_member_and_a_member_cut_short_ends_the_reading(tmp_path):
    path = tmp_path / "run" / "rollout_requests.jsonl.gz"
    store = RecordFile(path, tmp_path / "run")
    assert store.write(1, T0, records(3, step=1)) and store.write(2, T0 + S, records(4, step=2))
    store.close()
    steps = list(read_file(path))
    assert [(s.step, len(s.records)) for s in steps] == [(1, 3), (2, 4)]
    assert steps[1].records[0].id == "2-0" and steps[1].records[0].step == 2
    assert record_files(tmp_path / "run") == [path]
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a process killed while writing step 2
    assert [s.step for s in read_file(path)] == [1]


def test_the_budget_leaves_a_step_out_and_says_how_many(tmp_path):
    root = tmp_path / "run"
    store = RecordFile(root / "rollout_requests.jsonl.gz", root, budget_bytes=3000)
    kept = [store.write(step, T0, records(50, step=step)) for step in range(1, 6)]
    store.close()
    assert kept[0] and not kept[-1]
    assert store.written_bytes <= 3000 + 200 * kept.count(False)  # each step left out writes a line of its own
    steps = read_run(root)
    assert sorted(steps) == [1, 2, 3, 4, 5]
    assert [s.left_out for s in steps.values()] == [0 if k else 50 for k in kept]
    assert store.records == 50 * kept.count(True) and store.left_out == 50 * kept.count(False)


def test_an_engine_monotonic_clock_maps_to_the_run_clock_once_and_is_checked():
    clock = EngineClock()
    wall, mono = time.time_ns(), time.monotonic()
    assert abs(clock.monotonic(mono) - wall) < 5_000_000
    assert clock.monotonic(0.0) is None and EngineClock.wall(0) is None
    ok = RequestRecord(id="a", replica=0, arrival_ns=wall, queued_ns=clock.monotonic(mono) + 100_000)
    assert clock.check([ok]) is None
    off = EngineClock(clock.offset_ns - 10 * S)  # mapped ten seconds early: the engine ran elsewhere
    bad = RequestRecord(id="b", replica=0, arrival_ns=wall, queued_ns=off.monotonic(mono))
    said = off.check([bad])
    assert said is not None and "measured again" in said and off.remapped == 1
    assert abs(off.offset_ns - clock.offset_ns) < 5_000_000


def test_two_replicas_requests_of_one_id_stay_two_and_a_framework_record_joins_its_replica():
    """vLLM numbers each engine's requests from 0: the two replicas' request "0" of a step are two requests (the
    vLLM demo lost one replica's 16 records a step to the other's before). A record without a replica (verl's
    per-sample metrics) fills what the first replica's record of its id left None."""
    from rlprof.request_records import joined

    a = RequestRecord("0", 0, step=1, arrival_ns=10, last_token_ns=20)
    b = RequestRecord("0", 1, step=1, arrival_ns=11, last_token_ns=40)
    framework = RequestRecord("0", -1, step=1, generate_s=0.5)
    kept = joined([framework, a, b])
    assert [(r.id, r.replica) for r in kept] == [("0", 0), ("0", 1)]
    assert kept[0].generate_s == 0.5 and kept[1].generate_s is None
    assert joined([a, RequestRecord("0", 0, step=1, generated_tokens=3)])[0].generated_tokens == 3  # one request's two parts: one record
