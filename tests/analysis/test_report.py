"""``rlprof report`` on manifests: the step anatomy, files counted once, run selection, the verdict.

The manifests are what the core's Profilers write (``process``, ``step``, ``region``, ``artifact``,
``finalized``... through the real :class:`rlprof.manifest.ManifestWriter`), generated for exact
numbers by :mod:`rlprof.testing.generated_run` or written record by record; the demo tests
(tests/analysis/test_report_demo.py) check the same report on real runs.
"""

import builtins
import gzip
import json
import shutil
from pathlib import Path

import pytest

from rlprof.manifest import ManifestWriter, read_records
from rlprof.analysis.report import build_report, build_reports, render, verdict
from rlprof.cli.report import main
from rlprof.testing.generated_run import RegionSpec, generate_run

RUN = "20261122-050000-aaaaaa"
FLAT = (  # exact durations: no jitter in these tests
    RegionSpec("rollout", "rollout_generate", 40.0),
    RegionSpec("ref", "ref_compute_log_prob", 8.0),
    RegionSpec("actor", "actor_update", 30.0),
    RegionSpec("actor", "actor_optimizer_step", 6.0, parent="actor_update", offset_ms=20.0),
)


def run_json(capsys, *args) -> tuple[int, dict]:
    code = main([*map(str, args), "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_step_anatomy_per_region_min_median_max_slowest_rank_and_share(tmp_path, capsys):
    generate_run(tmp_path, run_id=RUN, ranks=3, steps=(1, 2), regions=FLAT, jitter=0.0,
                 slow={(2, "actor_update"): 2.0, (0, "rollout_generate"): 1.1})
    code, data = run_json(capsys, tmp_path)
    assert code == 0
    [run] = data["runs"]
    assert [s["step"] for s in run["steps"]] == [1, 2]
    step = run["steps"][0]
    regions = {r["region"]: r for r in step["regions"]}
    assert list(regions) == ["rollout_generate", "ref_compute_log_prob", "actor_update", "actor_optimizer_step"]
    for r in regions.values():  # the fields every region carries
        assert {"min_ms", "median_ms", "max_ms", "slowest_rank", "share_of_step", "per_rank"} <= set(r)
    update = regions["actor_update"]
    assert (update["min_ms"], update["median_ms"], update["max_ms"], update["slowest_rank"]) == (30.0, 30.0, 60.0, 2)
    assert (update["slowest"], update["slowest_replica"], update["stragglers"]) == ("rank 2", None, ["rank 2"])
    assert [p["ms"] for p in update["per_rank"]] == [30.0, 30.0, 60.0]
    generate = regions["rollout_generate"]
    assert (generate["max_ms"], generate["slowest_rank"], generate["stragglers"]) == (44.0, 0, [])  # +10%: not a straggler
    # a rank's step lasts its top-level regions, 1 ms after each and 0.5 ms at either end (generated_run.GAP_MS)
    per_rank = {p["rank"]: p["ms"] for p in step["per_rank"]}
    assert per_rank == {0: pytest.approx(82 + 4), 1: pytest.approx(78 + 4), 2: pytest.approx(108 + 4)}
    assert step["median_ms"] == pytest.approx(86.0) and step["slowest_rank"] == 2
    # the step time is its window: the ranks start within 0.2 ms of each other and the slow rank ends last
    assert step["span_ms"] == pytest.approx(112.0, abs=0.2)
    assert update["share_of_step"] == pytest.approx(30 / step["span_ms"], abs=1e-4)
    nested = regions["actor_optimizer_step"]
    assert nested["depth"] == 1 and nested["parent"] == "actor_update"
    # outside regions: only what no rank's top-level region covers (0.5 ms before the first, the slow
    # rank's last gap and end); the other ranks' regions fill its gaps
    assert step["untracked_ms"] == pytest.approx(2.0, abs=0.3)
    assert [(s["step"], s["region"], s["rank"]) for s in run["stragglers"]] == [(1, "actor_update", 2), (2, "actor_update", 2)]
    summary = {r["region"]: r for r in run["regions"]}
    assert summary["actor_update"]["steps"] == 2 and summary["actor_update"]["max_ms"] == 60.0


def test_text_report_shows_the_anatomy_and_flags_stragglers(tmp_path, capsys):
    generate_run(tmp_path, run_id=RUN, ranks=4, steps=(1,), regions=FLAT, jitter=0.0, slow={(3, "rollout_generate"): 1.5})
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "step 1: " in out and "first start to last end over 4 ranks (each: median" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("rollout_generate"))
    assert line.split()[1:6] == ["4", "40.0", "40.0", "60.0", "rank"] and "straggler: rank 3" in line
    assert "step 1 rollout_generate: rank 3 (node0) 60.0 ms vs the others' median 40.0 ms (+50%)" in out
    assert "problems: none" in out
    # a higher threshold: no flag
    assert main([str(tmp_path), "--straggler-pct", "60"]) == 0
    out = capsys.readouterr().out
    assert "straggler: rank" not in out and "0 straggler flags" in out


@pytest.mark.parametrize("seed", range(1, 8))
def test_stragglers_stand_clear_of_the_noise(tmp_path, seed):
    """Issue 34: two runs of the same code flagged 2 stragglers, then 0. Here every duration varies by up to
    20% at random (seeds 1-7; the rule without the noise term flagged 1 to 9 processes in each) and no
    process is slower: nobody straggles. Rank 2 really 2x slower in actor_update is still flagged, alone
    (60% slower was, before issue 40 asked the margin to lie beyond the noise: 60% over the median, less a
    noise of up to 40%, is not 25% clear of it)."""
    generate_run(tmp_path / "noise", ranks=4, steps=(1, 2, 3, 4, 5), jitter=0.2, seed=seed)
    [noise] = build_reports([tmp_path / "noise"])
    assert noise.anatomy.stragglers == []
    generate_run(tmp_path / "slow", ranks=4, steps=(1, 2, 3, 4, 5), jitter=0.2, seed=seed, slow={(2, "actor_update"): 2.0})
    [slow] = build_reports([tmp_path / "slow"])
    flagged = [(s.region, s.time.name) for s in slow.anatomy.stragglers]
    assert set(flagged) == {("actor_update", "rank 2")} and len(flagged) >= 3  # in most of the 5 steps


def test_a_region_entered_twice_in_a_step_counts_twice(tmp_path):
    writer = ManifestWriter(tmp_path / RUN / "manifest" / "rank0-n-1.jsonl", {"run": RUN, "rank": 0, "host": "n", "pid": 1})
    writer.write("process", roles=["rollout"], selected_roles=["rollout"], steps=[1], mode="e2e", tools=["torch"], expected_captures=1)
    t = 1_000_000_000
    for begin, ms in ((t, 5.0), (t + 10_000_000, 7.0)):
        writer.write("region", step=1, role="rollout", region="rollout_generate", parent=None, depth=0, capture="step1",
                     start_ns=begin, end_ns=begin + int(ms * 1e6), duration_ms=ms, iterations=None, marked_iterations=0, error=None)
    writer.write("step", step=1, start_ns=t, end_ns=t + 20_000_000, duration_ms=20.0)
    [report] = build_reports([tmp_path])
    [region] = report.anatomy.steps[0].regions
    assert region.spread.median_ms == 12.0 and region.spread.per_rank[0].count == 2
    assert region.share_of_step == pytest.approx(0.6)


def test_an_end_to_end_file_holding_three_roles_is_counted_once(tmp_path, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1, 2), trace_bytes=4 * 1000)
    code, data = run_json(capsys, tmp_path)
    [run] = data["runs"]
    assert len(run["files"]) == 4 and run["total_size"] == 4000  # 2 steps x 2 ranks, 1000 bytes each
    assert {tuple(f["roles"]) for f in run["files"]} == {("rollout", "ref", "actor")}
    assert len(list(run_dir.rglob("*.pt.trace.json.gz"))) == 4
    assert main([str(tmp_path)]) == 0
    assert "files (4, 3.9 KiB)" in capsys.readouterr().out


def test_the_report_never_opens_a_trace_and_works_after_traces_are_removed(tmp_path, capsys, monkeypatch):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1, 2), regions=FLAT, jitter=0.0, trace_bytes=8000)
    real_open, real_gzip_open = builtins.open, gzip.open

    def guarded(opener):
        def open_(file, *args, **kwargs):
            assert ".trace.json" not in str(file), f"the report opened a trace: {file}"
            return opener(file, *args, **kwargs)
        return open_

    monkeypatch.setattr(builtins, "open", guarded(real_open))
    monkeypatch.setattr(gzip, "open", guarded(real_gzip_open))
    code, before = run_json(capsys, tmp_path)
    assert code == 0
    for capture in ("step1", "step2"):
        shutil.rmtree(run_dir / capture)  # uploaded and removed by a finish hook
    code, after = run_json(capsys, tmp_path)
    assert code == 0
    assert after["runs"][0]["steps"] == before["runs"][0]["steps"]
    assert all(f["exists"] is False for f in after["runs"][0]["files"])
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "4 no longer on disk" in out and "actor_update" in out


def test_every_run_is_listed_newest_first_unless_one_is_named(tmp_path, capsys):
    older, newer = "20261122-040000-111111", "20261122-050000-222222"
    generate_run(tmp_path / "a", run_id=older, ranks=1, steps=(1,))
    generate_run(tmp_path / "b", run_id=newer, ranks=1, steps=(1,))
    assert [r.run_id for r in build_reports([tmp_path / "a", tmp_path / "b"])] == [newer, older]
    assert [r.run_id for r in build_reports([tmp_path], run="20261122-04")] == [older]
    code, data = run_json(capsys, tmp_path / "a", tmp_path / "b")
    assert [r["run"] for r in data["runs"]] == [newer, older]
    assert main([str(tmp_path), "--run", "nope"]) == 2
    assert "matches no runs" in capsys.readouterr().err
    assert main([str(tmp_path), "--run", "20261122"]) == 2  # ambiguous prefix


def test_nothing_to_report_is_a_usage_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "no rlprof manifests" in capsys.readouterr().err
    assert main([str(tmp_path / "absent")]) == 2
    assert verdict([tmp_path]).ok is False


def test_missing_step_role_and_unfinalized_process_are_flagged(tmp_path, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1, 2), unfinalized=(1,))
    manifest = run_dir / "manifest" / "rank1-node0-1001.jsonl"  # rank 1 died in step 2: drop what it wrote then
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in lines if r.get("step") != 2))
    [report] = build_reports([tmp_path])
    assert {(m["rank"], m["step"], m["role"]) for m in report.missing} == {(1, 2, "actor"), (1, 2, "rollout"), (1, 2, "ref")}
    assert [p.rank for p in report.unfinalized] == [1]
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "missing: rank 1 (node0 pid 1001): torch wrote nothing for steps 2 x roles actor,rollout,ref" in out
    assert "not finalized: rank 1 (node0 pid 1001)" in out
    assert "FAILED" in out.splitlines()[0]
    step2 = {s.step: s for s in report.anatomy.steps}[2]
    assert [t.rank for t in step2.spread.per_rank] == [0]  # the anatomy shows what was recorded


def test_backend_errors_and_worker_failures_are_listed(tmp_path, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1,))
    writer = ManifestWriter(run_dir / "manifest" / "rank1-node0-1001.jsonl", {"run": RUN, "rank": 1, "host": "node0", "pid": 1001})
    writer.write("error", backend="torch", hook="stop_role", error="RuntimeError: disk full", kind="hook")
    controller = ManifestWriter(run_dir / "manifest" / "controller-node0-99.jsonl", {"run": RUN, "rank": None, "host": "node0", "pid": 99})
    controller.write("worker_failure", worker="actor_rollout_ref/rank2", worker_rank=2, call="step_boundary", step=1,
                     kind="died", error="ActorDiedError: The actor is dead")
    code, data = run_json(capsys, tmp_path)
    assert code == 1
    [run] = data["runs"]
    assert run["errors"] == [{"rank": 1, "host": "node0", "pid": 1001, "backend": "torch", "hook": "stop_role",
                              "error": "RuntimeError: disk full", "kind": "hook"}]
    assert run["worker_failures"][0]["worker"] == "actor_rollout_ref/rank2" and run["ok"] is False
    assert main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "backend error (hook): rank 1 (node0 pid 1001): torch in stop_role: RuntimeError: disk full" in out
    assert "worker failure: actor_rollout_ref/rank2 (rank 2) died in step_boundary at step 1" in out


def test_several_nodes_save_paths_merge_into_one_run(tmp_path, capsys):
    generate_run(tmp_path / "nodeA", run_id=RUN, ranks=[0, 1], ranks_per_host=2)
    generate_run(tmp_path / "nodeB", run_id=RUN, ranks=[2, 3], ranks_per_host=2)
    [report] = build_reports([tmp_path / "nodeA", tmp_path / "nodeB"])
    assert {(p.rank, p.host) for p in report.processes} == {(0, "node0"), (1, "node0"), (2, "node1"), (3, "node1")}
    assert len(report.run_dirs) == 2 and report.ok
    assert [t.rank for t in report.anatomy.steps[0].regions[0].spread.per_rank] == [0, 1, 2, 3]
    assert main([str(tmp_path / "nodeA"), str(tmp_path / "nodeB")]) == 0
    assert "4 profiling processes on 2 hosts" in capsys.readouterr().out


def test_discrete_captures_short_of_the_plan_are_missing(tmp_path):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=1, steps=(1,), mode="discrete", regions=FLAT)
    manifest = next((run_dir / "manifest").glob("*.jsonl"))
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]  # drop the ref capture's file
    manifest.write_text("".join(json.dumps(r) + "\n" for r in lines if r.get("capture") != "step1.ref_compute_log_prob" or r["type"] != "artifact"))
    [report] = build_reports([tmp_path])
    assert report.short_captures == [{"rank": 0, "replica_rank": None, "name": "rank 0", "host": "node0", "pid": 1000,
                                      "backend": "torch", "captures": 2, "expected": 3}]
    assert "torch wrote 2 of 3 expected captures" in render(report)
    assert {m["role"] for m in report.missing} == {"ref"}


def test_colocated_participants_of_one_process_take_the_union_of_roles(tmp_path):
    writer = ManifestWriter(tmp_path / RUN / "manifest" / "rank0-n-1.jsonl", {"run": RUN, "rank": 0, "host": "n", "pid": 1})
    writer.write("process", roles=["actor"], selected_roles=["actor"], steps=[1], mode="e2e", tools=["torch"], expected_captures=1)
    writer.write("process", roles=["ref"], selected_roles=["ref"], steps=[1], mode="e2e", tools=["torch"], expected_captures=1)
    writer.write("artifact", backend="torch", step=1, steps=[1], roles=["actor", "ref"], region=None, capture="step1",
                 path="step1/rank0-n-1/torch/rank0.pt.trace.json.gz", size=10, kind="file")
    writer.write("finalized", reason="end")
    [report] = build_reports([tmp_path])
    [process] = report.processes
    assert process.roles == ["actor", "ref"] and process.selected_roles == ["actor", "ref"]
    assert report.missing == [] and report.ok


def test_a_run_that_captured_nothing_fails_with_the_reason(tmp_path, capsys):
    import rlprof

    class NoDevice:
        @rlprof.hookimpl
        def check_environment(self):
            return ["no CUDA device: memory snapshots need CUDA"]

    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), backends={"nodevice": NoDevice()}, overrides=[
        "global_profiler.tool=nodevice", f"global_profiler.save_path={tmp_path}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()
    prof.finalize()
    report = build_report(prof.run.run_id, list(read_records([tmp_path])))
    assert report.missing == [] and report.captured_nothing and not report.ok
    assert report.unavailable == [{"rank": 0, "replica_rank": None, "name": "rank 0", "host": prof.run.host, "pid": prof.run.pid, "backend": "nodevice",
                                   "problems": ["no CUDA device: memory snapshots need CUDA"]}]
    result = verdict([tmp_path])
    assert result.ok is False
    assert f"nothing captured: nodevice cannot capture on {prof.run.host}: no CUDA device: memory snapshots need CUDA" in result.lines
    assert main([str(tmp_path)]) == 1
    assert "problems: none" not in capsys.readouterr().out


def test_verdict_of_a_complete_run_says_what_was_captured(tmp_path):
    generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1, 2), trace_bytes=2 * 2 * 512)
    result = verdict([tmp_path])
    assert result.ok is True
    assert result.lines[0] == "captured: torch wrote 4 files (2.0 KiB) for steps 1,2 on ranks 0,1"
    assert result.lines[-1] == "ok: every profiled step x role x rank produced output"


def test_a_damaged_manifest_never_gives_a_traceback(tmp_path, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1,), regions=FLAT, jitter=0.0)
    manifest = run_dir / "manifest" / "rank1-node0-1001.jsonl"
    with open(manifest, "a") as handle:
        for bad in ({"type": "region", "run": RUN, "rank": 1, "step": 1, "region": "actor_update"},  # no times
                    {"type": "step", "run": RUN, "rank": "1", "step": 1, "start_ns": 1, "end_ns": 2, "duration_ms": 0.0},
                    {"type": "artifact", "run": RUN, "rank": 1, "backend": "torch"},  # no path
                    {"type": "mystery", "run": RUN}):
            handle.write(json.dumps(bad) + "\n")
        handle.write('{"type": "region", "run": "' + RUN + '", "ra')  # cut short by a killed process
    code, data = run_json(capsys, tmp_path)
    assert code == 0
    update = next(r for r in data["runs"][0]["steps"][0]["regions"] if r["region"] == "actor_update")
    assert [p["ms"] for p in update["per_rank"]] == [30.0, 30.0]  # the damaged records were left out
    out = tmp_path / "t.json"
    from rlprof.cli.timeline import main as timeline

    assert timeline([str(tmp_path), "-o", str(out)]) == 0


def test_sampled_iterations_are_shown(tmp_path, capsys):
    regions = (RegionSpec("rollout", "rollout_generate", 40.0, iterations=(30, 70)), RegionSpec("actor", "actor_update", 30.0))
    generate_run(tmp_path, run_id=RUN, ranks=2, steps=(1,), roles=("actor", "rollout"), regions=regions, jitter=0.0)
    assert main([str(tmp_path)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("rollout_generate"))
    assert line.endswith("sampled it 30-70")
    code, data = run_json(capsys, tmp_path)
    generate = data["runs"][0]["steps"][0]["regions"][0]
    assert generate["iterations"] == {"rank 0": [[30, 70]], "rank 1": [[30, 70]]}


def test_many_ranks_are_said_as_ranges(tmp_path):
    generate_run(tmp_path, run_id=RUN, ranks=[0, 1, 2, 3, 5, 6], steps=(1, 2, 3))
    assert verdict([tmp_path]).lines[0] == "captured: torch wrote 18 files (0 B) for steps 1-3 on ranks 0-3,5,6"


def test_a_capture_skipped_with_a_reason_is_explained_not_missing(tmp_path, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=1, steps=(1,), mode="discrete", regions=FLAT)
    manifest = next((run_dir / "manifest").glob("*.jsonl"))
    lines = [json.loads(x) for x in manifest.read_text().splitlines()]  # the ref capture wrote nothing...
    manifest.write_text("".join(json.dumps(r) + "\n" for r in lines if r.get("capture") != "step1.ref_compute_log_prob" or r["type"] != "artifact"))
    writer = ManifestWriter(manifest, {"run": RUN, "rank": 0, "host": "node0", "pid": 1000})
    writer.write("skip", backend="torch", hook="start_role", reason="the tool was busy", capture="step1.ref_compute_log_prob",
                 steps=[1], roles=["ref"], region="ref_compute_log_prob", step=1)  # ...and said why
    writer.close()
    [report] = build_reports([tmp_path])
    assert report.ok and report.missing == [] and report.short_captures == []
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "skipped: rank 0: torch capture step1.ref_compute_log_prob: the tool was busy" in out


def test_backend_warnings_and_colocated_warnings_are_shown_and_fail_nothing(tmp_path, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=1, steps=(1,))
    writer = ManifestWriter(next((run_dir / "manifest").glob("*.jsonl")), {"run": RUN, "rank": 0, "host": "node0", "pid": 1000})
    writer.write("warning", kind="backend", backend="torch", hook="start_step", message="fell back to CPU activities",
                 step=1, capture="step1")
    writer.write("warning", kind="colocated", key="global_profiler.tool", message="colocated Profilers disagree on the tools",
                 roles=["critic"])
    writer.close()
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "warning: rank 0: torch: fell back to CPU activities" in out
    assert "warning: rank 0: colocated: colocated Profilers disagree on the tools" in out
    [run] = run_json(capsys, tmp_path)[1]["runs"]
    assert [w["kind"] for w in run["warnings"]] == ["backend", "colocated"]
