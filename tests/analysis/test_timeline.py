"""``rlprof timeline``: one Chrome/Perfetto trace per run, from the manifests (and, asked, the torch traces).

Manifests come from :mod:`rlprof.testing.generated_run` (exact numbers) or are written around a real
``torch.profiler`` capture so the clock alignment is checked against what really ran; HTA (installed
by scripts/setup.sh) must load the result. tests/analysis/test_report_demo.py draws a real 2-worker demo run.
"""

import importlib.util
import json
import time
from pathlib import Path

import pytest

from rlprof.manifest import ManifestWriter
from rlprof.testing.generated_run import START_NS, RegionSpec, generate_run
from rlprof.cli.timeline import main, parse_steps
from rlprof.analysis.traces import clock_offset_ns

RUN = "20261122-050000-aaaaaa"
REGIONS = (
    RegionSpec("rollout", "rollout_generate", 40.0, iterations=(0, 3)),
    RegionSpec("ref", "ref_compute_log_prob", 8.0),
    RegionSpec("actor", "actor_update", 30.0),
    RegionSpec("actor", "actor_optimizer_step", 6.0, parent="actor_update", offset_ms=20.0),
)


def draw(tmp_path, *args) -> dict:
    out = tmp_path / "timeline.json"
    assert main([*map(str, args), "-o", str(out), "--force"]) == 0  # drawn again in one test: replaced, as asked
    return json.loads(out.read_text())


def names(trace: dict) -> tuple[dict, dict]:
    """``{pid: process name}``, ``{(pid, tid): thread name}``."""
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    return procs, threads


def test_a_process_per_rank_a_track_per_role_and_every_region_as_a_slice(tmp_path):
    generate_run(tmp_path / "save", run_id=RUN, ranks=3, steps=(1, 2), regions=REGIONS, jitter=0.0)
    trace = draw(tmp_path, tmp_path / "save")
    procs, threads = names(trace)
    assert sorted(procs.values()) == [f"rank {r} · actor+rollout+ref (node0)" for r in range(3)]
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for pid, name in procs.items():
        tracks = {threads[pid, e["tid"]] for e in slices if e["pid"] == pid}
        assert tracks == {"steps", "actor", "rollout", "ref"}, name
        mine = [e for e in slices if e["pid"] == pid]
        assert sorted(e["name"] for e in mine if threads[pid, e["tid"]] == "steps") == ["ProfilerStep#1", "ProfilerStep#2"]
        for role, region in (("rollout", "rollout_generate"), ("ref", "ref_compute_log_prob"), ("actor", "actor_update")):
            found = [e for e in mine if e["name"] == region]
            assert sorted(e["args"]["step"] for e in found) == [1, 2] and {threads[pid, e["tid"]] for e in found} == {role}
    update = next(e for e in slices if e["name"] == "actor_update" and e["args"]["step"] == 1)
    inner = next(e for e in slices if e["name"] == "actor_optimizer_step" and e["args"]["step"] == 1 and e["pid"] == update["pid"])
    assert inner["tid"] == update["tid"]  # nested on the same track...
    assert update["ts"] + 20_000 == pytest.approx(inner["ts"]) and inner["dur"] == pytest.approx(6_000)  # ...inside its parent
    assert update["dur"] == pytest.approx(30_000)  # microseconds
    generate = next(e for e in slices if e["name"] == "rollout_generate")
    assert generate["args"]["iterations"] == [0, 3] and generate["args"]["capture"].startswith("step")
    assert min(e["ts"] for e in slices) >= 0 and trace["otherData"]["rlprof"]["origin_ns"] >= START_NS
    markers = [e["name"] for e in trace["traceEvents"] if e["ph"] == "i"]
    assert markers == ["step 1 begins", "step 2 begins"]


def test_steps_filter_and_ranks_on_several_hosts(tmp_path):
    generate_run(tmp_path / "save", run_id=RUN, ranks=4, ranks_per_host=2, steps=(1, 2, 3), regions=REGIONS)
    trace = draw(tmp_path, tmp_path / "save", "--steps", "2-3")
    procs, _ = names(trace)
    assert sorted(procs.values())[-1] == "rank 3 · actor+rollout+ref (node1)"
    assert {e["args"]["step"] for e in trace["traceEvents"] if e["ph"] == "X"} == {2, 3}
    assert parse_steps("1,3,5-7") == [1, 3, 5, 6, 7]


def test_replaces_a_file_only_with_force_and_says_when_there_is_nothing_to_draw(tmp_path, capsys):
    run_dir = generate_run(tmp_path / "save", run_id=RUN, ranks=1, steps=(1,), trace_bytes=100)
    [trace] = run_dir.rglob("*.pt.trace.json.gz")
    before = trace.read_bytes()
    assert main([str(tmp_path / "save"), "-o", str(trace)]) == 2  # a mistyped -o: the trace is kept
    err = capsys.readouterr().err
    assert trace.read_bytes() == before and f"{trace} exists; nothing was written" in err and "--force" in err
    out = tmp_path / "timeline.json"
    assert main([str(tmp_path / "save"), "-o", str(out)]) == 0
    assert main([str(tmp_path / "save"), "-o", str(out), "--steps", "1"]) == 2  # an earlier timeline too: kept
    assert json.loads(out.read_text())["otherData"]["rlprof"]["steps"] is None
    assert main([str(tmp_path / "save"), "-o", str(out), "--steps", "1", "--force"]) == 0  # replaced, as asked
    assert json.loads(out.read_text())["otherData"]["rlprof"]["steps"] == [1]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    assert main([str(tmp_path / "save"), "-o", str(tmp_path / "t.json"), "--steps", "9"]) == 1
    assert "nothing to draw" in capsys.readouterr().err and not (tmp_path / "t.json").exists()
    assert main([str(tmp_path / "empty"), "-o", str(tmp_path / "t.json")]) == 2
    assert main([str(tmp_path / "save"), "-o", str(tmp_path / "t.json"), "--steps", "x"]) == 2


def test_with_traces_skips_what_is_not_a_trace_and_says_so(tmp_path, capsys):
    generate_run(tmp_path / "save", run_id=RUN, ranks=1, steps=(1,), trace_bytes=2048)  # filler bytes, not JSON
    out = tmp_path / "t.json"
    assert main([str(tmp_path / "save"), "-o", str(out), "--with-traces"]) == 0
    assert "not merged" in capsys.readouterr().err
    assert any(e["name"] == "actor_update" for e in json.loads(out.read_text())["traceEvents"])


@pytest.mark.slow
def test_hta_loads_the_timeline(tmp_path):
    if importlib.util.find_spec("hta") is None:
        pytest.skip("HolisticTraceAnalysis is not installed (scripts/setup.sh installs it)")
    from hta.trace_analysis import TraceAnalysis

    generate_run(tmp_path / "save", run_id=RUN, ranks=2, steps=(1, 2), regions=REGIONS)
    out = tmp_path / "timeline.json"
    assert main([str(tmp_path / "save"), "-o", str(out)]) == 0
    analysis = TraceAnalysis(trace_files={0: str(out)}, trace_dir=str(tmp_path), include_last_profiler_step=True)
    frame = analysis.t.get_trace(0)
    symbols = analysis.t.symbol_table.get_sym_table()
    found = {symbols[i] for i in frame["name"].unique()}
    assert {"rollout_generate", "ref_compute_log_prob", "actor_update", "actor_optimizer_step", "ProfilerStep#1"} <= found
    assert set(frame["pid"]) == {1, 2}  # both ranks' processes
    assert {1, 2} <= set(frame["iteration"])  # HTA numbered the steps from the ProfilerStep#N slices


def test_clock_alignment_rules():
    # Kineto >= 2.1: ts relative to baseTimeNanoseconds
    assert clock_offset_ns({"baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": []}, {}) == (
        1_700_000_000_000_000_000, "baseTimeNanoseconds")
    # older Kineto: ts since the epoch
    assert clock_offset_ns({"traceEvents": [{"ph": "X", "ts": 1.7e15, "dur": 1}]}, {})[0] == 0
    # neither: put rlprof's own range where the manifest says it began
    trace = {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 500.0, "dur": 10}]}
    assert clock_offset_ns(trace, {"actor_update": 2_000_000}) == (2_000_000 - 500_000, "aligned on actor_update")
    assert clock_offset_ns(trace, {"other": 1}) is None


@pytest.mark.slow
def test_with_traces_merges_a_real_torch_trace_on_the_manifests_clock(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import profile, record_function

    run_dir = tmp_path / "save" / RUN
    rel = Path("step1") / "rank0-node0-1" / "torch" / "rank0.pt.trace.json"
    writer = ManifestWriter(run_dir / "manifest" / "rank0-node0-1.jsonl", {"run": RUN, "rank": 0, "host": "node0", "pid": 1})
    writer.write("process", roles=["actor"], selected_roles=["actor"], steps=[1], mode="e2e", tools=["torch"], expected_captures=1)
    with profile() as prof:
        step_start = time.time_ns()
        time.sleep(0.002)
        begin = time.time_ns()
        with record_function("actor_update"):
            torch.randn(64, 64) @ torch.randn(64, 64)
            time.sleep(0.01)
        end = time.time_ns()
        time.sleep(0.002)
        step_end = time.time_ns()
    (run_dir / rel).parent.mkdir(parents=True)
    prof.export_chrome_trace(str(run_dir / rel))
    writer.write("region", step=1, role="actor", region="actor_update", parent=None, depth=0, capture="step1", start_ns=begin,
                 end_ns=end, duration_ms=(end - begin) / 1e6, iterations=None, marked_iterations=0, error=None)
    writer.write("step", step=1, start_ns=step_start, end_ns=step_end, duration_ms=(step_end - step_start) / 1e6)
    writer.write("artifact", backend="torch", step=1, steps=[1], roles=["actor"], region=None, capture="step1", path=str(rel),
                 size=(run_dir / rel).stat().st_size, kind="file")
    writer.write("finalized", reason="end")

    trace = draw(tmp_path, tmp_path / "save", "--with-traces")
    _, threads = names(trace)
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ours = next(e for e in slices if e["cat"] == "rlprof.region")
    theirs = next(e for e in slices if e["name"] == "actor_update" and e.get("cat") == "user_annotation")
    assert theirs["pid"] == ours["pid"] and threads[theirs["pid"], theirs["tid"]].startswith("torch · ")
    # torch's range lies inside the wall-clock window the manifest measured around it (1 ms slack for the clocks)
    assert ours["ts"] - 1000 <= theirs["ts"] and theirs["ts"] + theirs["dur"] <= ours["ts"] + ours["dur"] + 1000
    assert theirs["dur"] >= 10_000 * 0.9
    assert any(e["name"] == "aten::mm" and e["pid"] == ours["pid"] for e in slices)
