"""Rollout replicas (verl's agent-loop mode) apart from trainer ranks, in every analysis output.

The runs are generated (:mod:`rlprof.testing.generated_run`, ``replicas=2``): 2 trainer ranks and 2
inference-engine replica processes, whose manifests say ``rank 0`` and ``rank 1`` too (as engines
report it) but carry ``replica_rank``. Generation runs in the replicas for ~80% of the step while the
trainer ranks wait outside any region, as in a real verl run, where a report that only looked at
the trainer's processes said 97% of the step was "outside regions".
"""

import json
import re
import shutil
import subprocess

import pytest

from rlprof.cli.compare import main as compare
from rlprof.analysis.report import build_reports
from rlprof.cli.report import main as report
from rlprof.cli.timeline import main as timeline
from rlprof.testing.generated_run import RegionSpec, generate_run

RUN = "20261122-050000-aaaaaa"
AGENT_LOOP = (  # generation 400 of ~500 ms
    RegionSpec("rollout", "rollout_generate", 400.0),
    RegionSpec("actor", "actor_compute_log_prob", 30.0),
    RegionSpec("ref", "ref_compute_log_prob", 20.0),
    RegionSpec("actor", "actor_update", 40.0),
)


def agent_loop_run(path, run_id=RUN, **kwargs):
    options = {"ranks": 2, "replicas": 2, "steps": (1, 2), "regions": AGENT_LOOP, "jitter": 0.0, **kwargs}
    return generate_run(path, run_id=run_id, **options)


def report_json(capsys, *args) -> dict:
    report([*map(str, args), "--json"])
    [run] = json.loads(capsys.readouterr().out)["runs"]
    return run


def test_generation_in_the_replicas_counts_inside_the_step(tmp_path, capsys):
    agent_loop_run(tmp_path, slow_replicas={1: 1.05})
    run = report_json(capsys, tmp_path)
    for step in run["steps"]:
        regions = {r["region"]: r for r in step["regions"]}
        assert list(regions) == ["rollout_generate", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update"]
        # the step time is the trainer's window: 0.5 + 420 (slowest replica) + 1 + 30 + 1 + 20 + 1 + 40 + 1 + 0.5 ms
        assert step["span_ms"] == pytest.approx(515.0, abs=0.3)
        assert step["untracked_ms"] < step["span_ms"] / 2
        assert step["untracked_ms"] == pytest.approx(5.0, abs=0.3)  # only the gaps no process's region covers
        generate = regions["rollout_generate"]
        assert [(p["name"], p["rank"], p["replica_rank"]) for p in generate["per_rank"]] == [
            ("replica 0", 0, 0), ("replica 1", 1, 1)]
        assert (generate["min_ms"], generate["median_ms"], generate["max_ms"]) == (400.0, 410.0, 420.0)
        assert (generate["slowest"], generate["slowest_replica"], generate["slowest_rank"]) == ("replica 1", 1, None)
        assert generate["share_of_step"] == pytest.approx(410 / step["span_ms"], abs=1e-3)
        update = regions["actor_update"]
        assert [p["name"] for p in update["per_rank"]] == ["rank 0", "rank 1"] and update["slowest_rank"] in (0, 1)
        # the step's own per-process times are the trainer ranks' step records
        assert [p["name"] for p in step["per_rank"]] == ["rank 0", "rank 1"] and step["median_ms"] > 500
    processes = {(p["name"], p["replica_rank"]) for p in run["processes"]}
    assert processes == {("rank 0", None), ("rank 1", None), ("replica 0", 0), ("replica 1", 1)}
    assert [p["name"] for p in run["processes"]] == ["rank 0", "rank 1", "replica 0", "replica 1"]
    assert run["ok"] is True


def test_the_text_report_names_replicas_apart_from_ranks(tmp_path, capsys):
    agent_loop_run(tmp_path, slow_replicas={1: 2.0}, trace_bytes=4000)
    assert report([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("rollout_generate"))
    assert line.split()[1:7] == ["2", "400.0", "600.0", "800.0", "replica", "1"] and line.endswith("straggler: replica 1")
    assert "step 1 rollout_generate: replica 1 (node0) 800.0 ms vs the others' median 400.0 ms (+100%)" in out
    step = next(x for x in out.splitlines() if x.startswith("step 1: "))
    assert "over 2 ranks (each: median" in step and "on rank " in step  # the step's own times: the trainer ranks'
    outside = next(x for x in out.splitlines() if x.strip().startswith("(outside regions)"))
    assert outside.split()[-1] == "1%"
    assert re.search(r"^  replica 0 +torch .*replica0\.trace\.json\.gz$", out, re.M)
    assert "on ranks 0,1 and replicas 0,1" in out
    assert "4 profiling processes" in out


def test_a_straggling_replica_is_flagged_as_a_replica(tmp_path, capsys):
    agent_loop_run(tmp_path, slow_replicas={0: 2.0}, steps=(1,))
    [run] = build_reports([tmp_path])
    [straggler] = run.anatomy.stragglers
    assert (straggler.region, straggler.time.name, straggler.time.replica_rank) == ("rollout_generate", "replica 0", 0)
    data = report_json(capsys, tmp_path)
    assert data["stragglers"][0]["name"] == "replica 0" and data["stragglers"][0]["replica_rank"] == 0
    assert data["steps"][0]["regions"][0]["stragglers"] == ["replica 0"]


def test_the_timeline_has_a_process_per_replica(tmp_path):
    agent_loop_run(tmp_path / "save")
    out = tmp_path / "timeline.json"
    assert timeline([str(tmp_path / "save"), "-o", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert [procs[pid] for pid in sorted(procs)] == ["rank 0 · actor+ref (node0)", "rank 1 · actor+ref (node0)",
                                                      "replica 0 · rollout (node0)", "replica 1 · rollout (node0)"]
    by_name = {name: pid for pid, name in procs.items()}
    for replica in (0, 1):
        pid = by_name[f"replica {replica} · rollout (node0)"]
        slices = [e["name"] for e in events if e["ph"] == "X" and e["pid"] == pid and e["cat"] == "rlprof.region"]
        assert slices == ["rollout_generate", "rollout_generate"]  # one per step, on the replica, not on rank 0
    rank0 = [e["name"] for e in events if e["ph"] == "X" and e["pid"] == by_name["rank 0 · actor+ref (node0)"]]
    assert "rollout_generate" not in rank0


def test_compare_ranks_lists_replicas_as_replicas(tmp_path, capsys):
    steps = (1, 2, 3, 4, 5, 6, 7)  # per process, 6 compared steps a side: enough samples to tell a change from noise
    agent_loop_run(tmp_path / "a", run_id="20261122-050000-aaaaaa", steps=steps)
    agent_loop_run(tmp_path / "b", run_id="20261122-060000-bbbbbb", slow_replicas={1: 1.2}, steps=steps)
    assert compare([str(tmp_path / "a"), str(tmp_path / "b"), "--ranks", "--json"]) == 0
    rows = {(c["region"], c["name"]): c for c in json.loads(capsys.readouterr().out)["changes"]}
    assert {name for region, name in rows if region == "rollout_generate"} == {"replica 0", "replica 1"}
    slower = rows["rollout_generate", "replica 1"]
    assert (slower["rank"], slower["replica_rank"], slower["change_pct"]) == (None, 1, 20.0)
    assert rows["actor_update", "rank 1"]["rank"] == 1
    assert compare([str(tmp_path / "a"), str(tmp_path / "b"), "--ranks", "--fail-above", "10"]) == 1
    captured = capsys.readouterr()
    assert re.search(r"^rollout_generate +replica 1 +400\.00 +400\.00-400\.00 +480\.00 +480\.00-480\.00 +\+80\.00 +\+20\.0% +clearly slower$",
                     captured.out, re.M)
    assert "regression: rollout_generate on replica 1 400.00 -> 480.00 ms" in captured.err
    # across processes: the step time is the median step window, which grew by the slowest replica's 80 ms
    assert compare([str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    step = next(c for c in json.loads(capsys.readouterr().out)["changes"] if c["region"] == "(step)")
    assert step["change_ms"] == pytest.approx(80.0, abs=0.5)


@pytest.fixture
def page(tmp_path):
    agent_loop_run(tmp_path / "save", slow_replicas={1: 2.0}, steps=(1, 2, 3))
    out = tmp_path / "report.html"
    assert report([str(tmp_path / "save"), "--html", "-o", str(out)]) == 0
    return out


def test_the_html_heat_map_has_a_row_per_replica(page):
    text = page.read_text(encoding="utf-8")
    cells = re.findall(r'<rect class="cell[^"]*" data-process="([^"]+)" data-region="([^"]+)"', text)
    assert sorted({name for name, _ in cells}) == ["rank 0", "rank 1", "replica 0", "replica 1"]
    assert {region for name, region in cells if name.startswith("replica")} == {"rollout_generate"}
    assert re.findall(r'<rect class="cell straggler" data-process="([^"]+)" data-region="([^"]+)"', text) == [
        ("replica 1", "rollout_generate")]
    assert text.count("<td>replica 1 (node0)</td>") == 3  # one straggler row per step
    [outside] = set(re.findall(r"step 1: ([\d.]+) ms outside every process", text))
    assert float(outside) < 10  # generation counts inside the step


@pytest.mark.slow
def test_chromium_renders_the_replica_rows(page, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (sudo bash scripts/install-chromium.sh)")
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
                          "--disable-background-networking", "--disable-component-update", f"--user-data-dir={tmp_path / 'p'}",
                          "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    labels = re.findall(r'<svg class="heat-map".*?</svg>', dom.stdout, re.S)[0]
    assert [t for t in re.findall(r"<text x=\"0\"[^>]*>([^<]+)</text>", labels)] == ["rank 0", "rank 1", "replica 0", "replica 1"]


def test_a_run_that_profiled_only_the_replicas_takes_their_step_window(tmp_path, capsys):
    agent_loop_run(tmp_path, ranks=[], steps=(1,))
    run = report_json(capsys, tmp_path)
    [step] = run["steps"]
    assert [r["region"] for r in step["regions"]] == ["rollout_generate"]
    assert [p["name"] for p in step["per_rank"]] == ["replica 0", "replica 1"] and step["slowest_replica"] in (0, 1)
    assert step["span_ms"] == pytest.approx(400.0) and step["untracked_ms"] == pytest.approx(0.0)
    assert report([str(tmp_path)]) == 0
    assert "first start to last end over 2 replicas (each: median 400.0" in capsys.readouterr().out
