"""The async overlap table (rlprof.analysis.overlap): its arithmetic against an independent computation,
the worked example of docs/analysis.md ("Async overlap"), and what report and timeline show of it.

Records are built here, on whole milliseconds, so that the independent computation can count covered
milliseconds one by one (a union's length is how many unit cells some interval covers)."""

from __future__ import annotations

import importlib.util
import json
import statistics

import pytest
from hypothesis import given, settings, strategies as st

from rlprof.analysis.overlap import (GENERATE, HELD, LOAD, MISSING_NOTE, PAUSE, RESUME, SEND, UPDATE, WAIT,
                                     overlap_of)
from rlprof.analysis.runs import build_report

MS = 1_000_000
HOST = "node0"
BASE = 1_800_000_000_000 * MS
"""Records are on the host's wall clock (ns): the examples start here."""


def process(rank: int, pid: int, roles: list[str], replica_rank: int | None = None) -> dict:
    return {"type": "process", "run": "r", "rank": rank, "host": HOST, "pid": pid, "roles": roles,
            "selected_roles": roles, "steps": [2], "mode": "e2e", "tools": ["torch"], "replica_rank": replica_rank,
            "expected_captures": 1, "_manifest": f"m{pid}", "_run_dir": "/nowhere"}


def timing(kind: str, rank: int, pid: int, step: int, start_ms: int, end_ms: int, region: str | None = None) -> dict:
    record = {"type": kind, "run": "r", "rank": rank, "host": HOST, "pid": pid, "step": step,
              "start_ns": BASE + start_ms * MS, "end_ns": BASE + end_ms * MS, "duration_ms": float(end_ms - start_ms),
              "_manifest": f"m{pid}", "_run_dir": "/nowhere"}
    if region is not None:
        record.update(region=region, role=region.split("_")[0], depth=0 if region not in (LOAD, RESUME) else 1)
    return record


# ----------------------------------------------------------------------------------- the worked example

EXAMPLE = {
    # (rank, pid, replica_rank): {region: [(start_ms, end_ms), ...]} in version 2, whose steps span 0-100 ms
    (0, 10, None): {WAIT: [(0, 10)], UPDATE: [(10, 70)], SEND: [(80, 100)]},
    (1, 11, None): {WAIT: [(0, 14)], UPDATE: [(14, 70)], SEND: [(80, 100)]},
    (0, 20, 0): {GENERATE: [(0, 30), (35, 60)], HELD: [(60, 82)], PAUSE: [(82, 95)], LOAD: [(86, 90)], RESUME: [(90, 95)]},
    (1, 21, 1): {GENERATE: [(5, 33), (45, 85)], HELD: [(33, 45)], PAUSE: [(85, 97)], LOAD: [(90, 93)], RESUME: [(93, 97)]},
}


def example_records(staleness: bool = True) -> list[dict]:
    records = []
    for (rank, pid, replica), regions in EXAMPLE.items():
        records.append(process(rank, pid, ["rollout"] if replica is not None else ["actor"], replica))
        records.append(timing("step", rank, pid, 2, 0, 100))
        for region, spans in regions.items():
            records += [timing("region", rank, pid, 2, a, b, region) for a, b in spans]
    if staleness:
        records.append({"type": "staleness", "run": "r", "rank": None, "host": HOST, "pid": 1, "step": 2, "samples": 8,
                        "min": 0, "mean": 0.75, "max": 1, "source": "test", "_manifest": "m1", "_run_dir": "/nowhere"})
        records += [{**records[-1], "step": s, "mean": 1.0, "min": 1} for s in (1, 3)]
    return records


def test_the_worked_example_of_the_docs():
    """docs/analysis.md, "Async overlap", computes these by hand."""
    [v] = overlap_of(example_records()).versions
    assert v.step == 2 and v.window_ms == 100
    t = v.trainer
    assert (t.wait_ms, t.update_ms, t.send_ms, t.send_beyond_pause_ms) == (12, 58, 20, 5)
    r0, r1 = v.replicas
    assert (r0.generating_ms, r0.paused_ms, r0.held_ms, r0.other_ms) == (55, 13, 22, 10)
    assert (r0.transport_ms, r0.load_ms, r0.resume_ms) == (4, 4, 5)
    assert (r1.generating_ms, r1.paused_ms, r1.held_ms, r1.other_ms) == (68, 12, 12, 8)
    assert (r1.transport_ms, r1.load_ms, r1.resume_ms) == (5, 3, 4)
    assert (v.overlap_ms, round(v.overlap_share, 3)) == (58, round(58 / 60, 3))
    assert v.sync_ms == 20
    assert v.staleness == {"samples": 8, "min": 0, "mean": 0.75, "max": 1, "source": "test"}


def test_versions_without_regions_are_named_with_the_reason():
    overlap = overlap_of(example_records())
    assert [v.step for v in overlap.versions] == [2] and overlap.missing == [1, 3]
    assert overlap.as_dict()["missing_note"] == MISSING_NOTE


def test_held_by_the_generation_driver_holds_every_replica():
    """A ``rollout_held`` of a process that is neither a trainer rank nor a replica (verl's rollouter)
    counts in each replica's held time, united with its own, where the replica is not generating."""
    records = example_records() + [process(0, 30, ["rollout"]), timing("region", 0, 30, 2, 50, 65, HELD)]
    [v] = overlap_of(records).versions
    r0, r1 = v.replicas
    assert r0.held_ms == 22 and r1.held_ms == 12  # the driver's 50-65 fell where they generated (35-60, 45-85)
    assert (r0.other_ms, r1.other_ms) == (10, 8)  # ... or held anyway
    assert sorted(v.trainer.ranks) == [0, 1]  # the driver is no trainer rank


def test_a_replicas_row_adds_up_to_its_window_when_the_rollouter_holds_it_while_it_generates():
    """verl's fully async run showed a replica's row as 45% + 3% + 78% + 22% = 148%: the rollouter held the replica
    while the replica still generated the requests it had, and each figure was a union of its own. Each instant now
    counts once, in the first of generating, paused, held; other is the rest."""
    records = example_records() + [process(0, 30, ["rollout"]), timing("region", 0, 30, 2, 10, 90, HELD)]
    [v] = overlap_of(records).versions
    for r in v.replicas:
        assert r.generating_ms + r.paused_ms + r.held_ms + r.other_ms == v.window_ms
    r0 = v.replicas[0]  # generates 0-30, 35-60; the rollouter holds 10-90; its own hold 60-82; pauses 82-95
    assert (r0.generating_ms, r0.paused_ms, r0.held_ms, r0.other_ms) == (55, 13, 27, 5)
    assert (r0.transport_ms, r0.load_ms, r0.resume_ms) == (4, 4, 5)  # the weight sync split is its whole pause's
    from rlprof.analysis.report import render

    text = render(build_report("r", records))
    [row] = [line.split() for line in text.splitlines() if line.split()[:2] == ["2", "0"]]
    shares = [float(cell.strip("(%)")) for cell in row if cell.startswith("(") and cell.endswith("%)")]
    assert shares == [55, 13, 27, 5] and sum(shares) == 100


def test_a_trainer_rank_timed_in_two_processes_is_one_rank():
    """verl's fully async trainer waits for samples in its driver's process (the FullyAsyncTrainer actor,
    rank 0) and updates and sends in its worker's: rank 0's figures are both processes' regions united,
    one rank, never one process's figures overwriting the other's."""
    records = [r for r in example_records() if r.get("pid") != 11]  # rank 1 gone: one trainer rank
    records = [r for r in records if not (r.get("pid") == 10 and r.get("region") == WAIT)]
    records += [process(0, 40, ["actor"]), timing("step", 0, 40, 2, 0, 100), timing("region", 0, 40, 2, 0, 10, WAIT)]
    [v] = overlap_of(records).versions
    assert sorted(v.trainer.ranks) == [0]
    assert (v.trainer.wait_ms, v.trainer.update_ms, v.trainer.send_ms) == (10, 60, 20)


def test_the_frameworks_own_idle_figures_stand_beside_rlprofs():
    """verl's idle_ratio of a version, as the drop-in records it, beside rlprof's figure of the same side:
    the trainer's wait share of the window, the replicas' share not generating (their median)."""
    idle = {"type": "framework_idle", "run": "r", "rank": None, "host": HOST, "pid": 1, "_manifest": "m1", "_run_dir": "/nowhere"}
    records = example_records() + [
        {**idle, "step": 2, "side": "trainer", "idle_ratio": 0.2, "window_s": 0.1, "metric": "fully_async/trainer/idle_ratio"},
        {**idle, "step": 2, "side": "rollouter", "idle_ratio": 0.0, "window_s": 0.1, "metric": "fully_async/rollouter/idle_ratio"},
        {**idle, "step": 3, "side": "trainer", "idle_ratio": 0.5, "metric": "fully_async/trainer/idle_ratio"},  # no regions
        {**idle, "step": 2, "side": "trainer", "idle_ratio": 1, "metric": "an int, not a ratio: not read"},
    ]
    [v] = overlap_of(records).versions
    trainer, rollouter = v.framework_idle
    assert (trainer["side"], trainer["rlprof_ratio"], trainer["difference"]) == ("trainer", 0.12, -0.08)
    # replica 0 generated 55 of 100 ms, replica 1 68: not generating 0.45 and 0.32, median 0.385
    assert (rollouter["rlprof_ratio"], rollouter["difference"]) == (0.385, 0.385)
    report = build_report("r", records)  # what rlprof report reads: the records reach the table (they did not at first)
    assert [f["side"] for f in report.overlap.versions[0].framework_idle] == ["trainer", "rollouter"]
    text = "\n".join(__import__("rlprof.analysis.report", fromlist=["overlap_lines"]).overlap_lines(report.overlap))
    assert "fully_async/trainer/idle_ratio 0.200" in text and "-8.0%" in text and "+38.5%" in text
    from rlprof.analysis.html import render_page

    page = render_page([report])
    assert page.count('class="framework-idle"') == 2 and "rlprof's 0.120 (-8.0 points)" in page


def test_a_synchronous_run_has_no_overlap_table():
    records = [process(0, 10, ["actor", "rollout"]), timing("step", 0, 10, 1, 0, 50),
               timing("region", 0, 10, 1, 0, 20, "rollout_generate"), timing("region", 0, 10, 1, 20, 50, "actor_update")]
    assert overlap_of(records) is None
    report = build_report("r", records)
    assert report.overlap is None and report.as_dict()["overlap"] is None


# ----------------------------------------------------------------------------------- against an independent count

span = st.tuples(st.integers(0, 120), st.integers(1, 40)).map(lambda p: (p[0], p[0] + p[1]))
spans = st.lists(span, max_size=4)


@st.composite
def runs(draw):
    """A version with 1-3 trainer ranks and 1-3 replicas, random (possibly overlapping, possibly outside the
    window) intervals of every region, each process's step its own random span."""
    processes = {}
    pid = 100
    for rank in range(draw(st.integers(1, 3))):
        processes[(rank, pid, None)] = {WAIT: draw(spans), UPDATE: draw(spans), SEND: draw(spans)}
        pid += 1
    for replica in range(draw(st.integers(1, 3))):
        processes[(replica, pid, replica)] = {r: draw(spans) for r in (GENERATE, PAUSE, LOAD, RESUME, HELD)}
        pid += 1
    steps = {key: draw(span) for key in processes}
    return processes, steps


def covered(spans_: list[tuple[int, int]], window: tuple[int, int]) -> int:
    """Milliseconds of ``window`` some span covers, counted one by one."""
    return sum(1 for t in range(*window) if any(a <= t < b for a, b in spans_))


@settings(max_examples=300, deadline=None)
@given(runs())
def test_every_figure_is_a_clipped_union_counted_independently(run):
    processes, steps = run
    records = []
    for key, regions in processes.items():
        rank, pid, replica = key
        records.append(process(rank, pid, ["actor"] if replica is None else ["rollout"], replica))
        records.append(timing("step", rank, pid, 2, *steps[key]))
        for region, spans_ in regions.items():
            records += [timing("region", rank, pid, 2, a, b, region) for a, b in spans_]
    overlap = overlap_of(records)
    if not any(processes[k][WAIT] or processes[k][SEND] for k in processes if k[2] is None) and \
            not any(processes[k][PAUSE] or processes[k][HELD] for k in processes if k[2] is not None):
        assert overlap is None  # no region only async runs have
        return
    [v] = overlap.versions
    window = (min(a for a, _ in steps.values()), max(b for _, b in steps.values()))
    assert v.window_ms == window[1] - window[0]
    trainer = {k: p for k, p in processes.items() if k[2] is None}
    replicas = {k: p for k, p in processes.items() if k[2] is not None}
    pauses = [s for p in replicas.values() for s in p[PAUSE]]
    expected = {name: statistics.median(covered(p[region], window) for p in trainer.values())
                for name, region in (("wait_ms", WAIT), ("update_ms", UPDATE), ("send_ms", SEND))}
    beyond = statistics.median(sum(1 for t in range(*window) if any(a <= t < b for a, b in p[SEND])
                                   and not any(a <= t < b for a, b in pauses)) for p in trainer.values())
    t = v.trainer
    assert (t.wait_ms, t.update_ms, t.send_ms, t.send_beyond_pause_ms) == (
        expected["wait_ms"], expected["update_ms"], expected["send_ms"], beyond)
    for side, (key, p) in zip(v.replicas, sorted(replicas.items(), key=lambda i: i[0][2])):
        assert side.replica_rank == key[2]
        assert side.generating_ms == covered(p[GENERATE], window)
        # each instant once, in the first of generating, paused, held that covers it
        assert side.paused_ms == sum(1 for t_ in range(*window) if any(a <= t_ < b for a, b in p[PAUSE])
                                     and not any(a <= t_ < b for a, b in p[GENERATE]))
        assert side.held_ms == sum(1 for t_ in range(*window) if any(a <= t_ < b for a, b in p[HELD])
                                   and not any(a <= t_ < b for a, b in p[GENERATE] + p[PAUSE]))
        assert side.generating_ms + side.paused_ms + side.held_ms + side.other_ms == window[1] - window[0]
        assert side.load_ms == covered(p[LOAD], window) and side.resume_ms == covered(p[RESUME], window)
        assert side.other_ms == (window[1] - window[0]) - covered(p[GENERATE] + p[PAUSE] + p[HELD], window)
        assert side.transport_ms == sum(1 for t_ in range(*window) if any(a <= t_ < b for a, b in p[PAUSE])
                                        and not any(a <= t_ < b for a, b in p[LOAD] + p[RESUME]))
        assert side.between_steps_ms == (window[1] - window[0]) - covered([steps[key]], window)
    updates = [s for p in trainer.values() for s in p[UPDATE]]
    generating = [s for p in replicas.values() for s in p[GENERATE]]
    assert v.overlap_ms == sum(1 for t_ in range(*window) if any(a <= t_ < b for a, b in updates)
                               and any(a <= t_ < b for a, b in generating))
    syncing = [t_ for t_ in range(*window) if any(a <= t_ < b for a, b in pauses + [s for p in trainer.values() for s in p[SEND]])]
    assert v.sync_ms == ((syncing[-1] + 1 - syncing[0]) if syncing else None)


# ----------------------------------------------------------------------------------- report and timeline


def test_the_report_shows_the_table_in_text_json_and_html():
    from rlprof.analysis.html import render_page
    from rlprof.analysis.report import render
    from rlprof.analysis.verdict import report_dict

    report = build_report("r", example_records())
    text = render(report)
    assert "async overlap per parameter version" in text
    [row] = [line for line in text.splitlines() if line.strip().startswith("2 ") and "mean 0.75" in line]
    assert "12.0 (12%)" in row and "58.0 (97%)" in row  # waited; generated while updating
    assert "versions 1,3 are not shown" in text
    # the note says what is true: every region is timed every step (the README), its start and end kept on profiled ones
    assert "until rlprof times every step" not in text and "every version's regions are timed" in text
    facts = json.loads(json.dumps(report_dict(report)))
    [version] = facts["overlap"]["versions"]
    assert version["trainer"]["wait_ms"] == 12 and version["replicas"][1]["transport_ms"] == 5
    page = render_page([report])
    assert "<h3>Async overlap</h3>" in page and page.count('class="replica"') == 2


def test_the_timeline_marks_versions_and_joins_each_sync_to_every_replica(tmp_path):
    from rlprof.analysis.timeline import build_timeline

    events = list(build_timeline(example_records()))
    check_trace_event_format(events)
    names = {(e["pid"], e.get("args", {}).get("name")) for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert (0, "parameter versions") in names
    slices = [e for e in events if e["ph"] == "X" and e["pid"] == 0]
    assert [(e["name"], e["dur"]) for e in slices] == [("version 2", 100_000.0), ("weight sync to version 2", 20_000.0)]
    assert [e["name"] for e in events if e["ph"] == "i"] == ["version 2 begins"]
    flows = [e for e in events if e["ph"] in "sf"]
    assert len(flows) == 4  # one arrow per replica, from the trainer's send to the replica's load
    regions = {(e["pid"], e["tid"], e["ts"]): e["name"] for e in events if e["ph"] == "X"}
    assert sorted(regions[e["pid"], e["tid"], e["ts"]] for e in flows) == sorted([LOAD, LOAD, SEND, SEND])


def check_trace_event_format(events: list[dict]) -> None:
    """The Trace Event Format's rules Perfetto's JSON importer relies on, for what the timeline writes:
    every event has a phase and integer pid/tid; slices have a time and a duration >= 0; metadata names
    processes and threads; a flow's start binds to the slice enclosing it on its thread and its end
    (``bp: e``) to the slice enclosing it on its own, with one start and one end per id."""
    slices: dict[tuple, list[tuple[float, float]]] = {}
    for e in events:
        assert isinstance(e.get("ph"), str) and type(e.get("pid")) is int and type(e.get("tid")) is int, e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"), e
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            slices.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        if e["ph"] == "i":
            assert e.get("s") in ("g", "p", "t"), e
    ends: dict[str, list[str]] = {}
    for e in events:
        if e["ph"] in ("s", "f"):
            assert e.get("id") is not None
            if e["ph"] == "f":
                assert e.get("bp") == "e", e
            assert any(a <= e["ts"] <= b for a, b in slices.get((e["pid"], e["tid"]), ())), f"flow not on a slice: {e}"
            ends.setdefault(str(e["id"]), []).append(e["ph"])
    assert all(sorted(phases) == ["f", "s"] for phases in ends.values()), ends


@pytest.mark.slow
def test_hta_loads_an_async_timeline(tmp_path):
    if importlib.util.find_spec("hta") is None:
        pytest.skip("HolisticTraceAnalysis is not installed (scripts/setup.sh installs it)")
    from hta.trace_analysis import TraceAnalysis

    from rlprof.analysis.timeline import build_timeline

    out = tmp_path / "timeline.json"
    out.write_text(json.dumps({"traceEvents": list(build_timeline(example_records()))}))
    analysis = TraceAnalysis(trace_files={0: str(out)}, trace_dir=str(tmp_path), include_last_profiler_step=True)
    frame = analysis.t.get_trace(0)
    symbols = analysis.t.symbol_table.get_sym_table()
    assert {"version 2", "weight sync to version 2", SEND, LOAD, "ProfilerStep#2"} <= {symbols[i] for i in frame["name"].unique()}
