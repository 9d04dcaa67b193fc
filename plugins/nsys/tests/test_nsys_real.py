"""Against the real Nsight Systems CLI (Debian's nsight-systems 2022.4.2 in CI: scripts/install-nsys.sh).

What a user gets from ``nsys``: reports whose NVTX tables hold rlprof's step and role ranges, for
the profiled steps only, on the selected ranks only, one report per capture window, moved into the
run layout and listed in the manifest. Read back with ``nsys export --type sqlite``
(:mod:`rlprof_nsys.nvtx_summary`, the same code ``rlprof report`` uses).

Capture windows without CUDA: ``capture_range: nvtx`` (windows are NVTX ranges nsys captures with
``--capture-range=nvtx``); cudaProfilerStart/Stop windows need a GPU and are not exercised here.
Skipped, saying so, where ``nsys`` is not on PATH. About two minutes in all (two demo runs on Ray).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nsys_harness import SCENARIO_SCRIPT, verl_config
from rlprof.manifest import read_records
from rlprof_nsys.launch import command_options, worker_nsight_options
from rlprof_nsys.nvtx_summary import nvtx_ranges
from rlprof_nsys.options import validate
from tiers import heavy  # tests/tiers.py

NSYS = shutil.which("nsys")
pytestmark = pytest.mark.skipif(NSYS is None, reason="nsys (Nsight Systems CLI) is not on PATH: run scripts/install-nsys.sh as root")

STAGES = {"actor": ["update"], "ref": ["compute_log_prob"]}
REGIONS = [["ref", "compute_log_prob", 0], ["actor", "update", 0]]
ROLE_RANGES = {"ref_compute_log_prob", "actor_update"}
DEMO_ROLE_RANGES = {"rollout_generate", "ref_compute_log_prob", "actor_compute_log_prob", "actor_update"}
STEP = re.compile(r"step\d+\Z")


def spec(config, *, rank=0, world_size=1, run_steps=(1, 2, 3, 4)):
    return {"config": config, "rank": rank, "world_size": world_size, "roles": ["actor", "ref"], "stages": STAGES,
            "run_id": "real-nsys", "run_steps": list(run_steps), "regions": REGIONS, "without_torch": True}


def ranges(report: Path) -> dict[str, int]:
    """``{range name: instances}`` of the rlprof domain in one report."""
    return {r.name: r.count for r in nvtx_ranges(report, NSYS) if r.domain == "rlprof"}


def profile_loops(workdir: Path, *specs_and_options) -> list[dict]:
    """Run each ``(spec, nsys options)`` as ``nsys profile <options> python nsys_scenario.py``, all at once."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    running = []
    for index, (loop_spec, options) in enumerate(specs_and_options):
        spec_file, result_file = workdir / f"proc{index}.spec.json", workdir / f"proc{index}.result.json"
        spec_file.write_text(json.dumps(loop_spec))
        command = [NSYS, "profile", *command_options(options), "-o", str(workdir / f"proc{index}_%p"),
                   sys.executable, str(SCENARIO_SCRIPT), str(spec_file), str(result_file)]
        running.append((subprocess.Popen(command, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         text=True), result_file))
    results = []
    for proc, result_file in running:
        output, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, output[-3000:]
        results.append(json.loads(result_file.read_text()))
    return results


def nsys_files(run_dir: Path) -> list[dict]:
    return [r for r in read_records([run_dir]) if r.get("type") == "artifact" and r.get("backend") == "nsys"]


def windowed_options(config: dict, expected: int) -> dict[str, str]:
    """The options a Ray worker of this plan gets (rlprof_nsys.launch), plus NVTX tracing."""
    section = validate(config["global_profiler"]["global_tool_config"]["nsys"], "nsys")
    options, _ = worker_nsight_options(section, expected)
    return {"trace": "nvtx", **options}


def test_nvtx_windows_one_report_per_profiled_step_moved_into_the_run(tmp_path):
    config = verl_config(tmp_path / "out", steps=[1, 3], relocate=True, nsys={"capture_range": "nvtx"})
    options = windowed_options(config, expected=2)
    assert options["capture-range"] == "nvtx" and options["capture-range-end"] == "repeat-shutdown:2"
    (result,) = profile_loops(tmp_path / "run", (spec(config), options))

    assert result["windows_opened"] == result["expected_captures"] == result["windows_started"] == 2
    files = sorted(nsys_files(tmp_path / "out"), key=lambda r: r["window"])
    # moved at finalize: nsys had written both reports when the second window closed
    assert [(r["kind"], r["capture"], r["window"]) for r in files] == [("file", "step1", 1), ("file", "step3", 2)]
    run_dir = next((tmp_path / "out").iterdir())
    for record, step in zip(files, (1, 3)):
        report = run_dir / record["path"]
        assert report.name == f"proc0_{result['pid']}.{record['window']}.nsys-rep"
        assert report.parent.parent.parent.name == f"step{step}"
        names = ranges(report)
        assert names == {"rlprof_capture": 1, f"step{step}": 1, "ref_compute_log_prob": 1, "actor_update": 1}
    assert not list((tmp_path / "run").glob("*.nsys-rep"))  # nothing left behind


def test_windows_follow_the_capture_range_nsys_was_launched_with(tmp_path):
    # verl's case: the worker is launched with global_tool_config.nsys.worker_nsight_options
    # (capture-range=nvtx), but its backend sees only its role's section, where capture_range is the
    # default cudaProfilerApi: the windows must still be the NVTX ranges nsys waits for
    launched = verl_config(tmp_path / "unused", steps=[1, 3], nsys={"capture_range": "nvtx"})
    config = verl_config(tmp_path / "out", steps=[1, 3], relocate=True)
    assert "capture_range" not in config["global_profiler"]["global_tool_config"]["nsys"]
    (result,) = profile_loops(tmp_path / "run", (spec(config), windowed_options(launched, expected=2)))

    assert result["windows_opened"] == result["windows_started"] == 2
    files = sorted(nsys_files(tmp_path / "out"), key=lambda r: r["window"])
    assert [(r["kind"], r["capture"]) for r in files] == [("file", "step1"), ("file", "step3")]
    run_dir = next((tmp_path / "out").iterdir())
    assert ranges(run_dir / files[1]["path"]) == {"rlprof_capture": 1, "step3": 1, "ref_compute_log_prob": 1,
                                                  "actor_update": 1}


def test_reports_written_at_exit_are_pending_then_relocated(tmp_path):
    # an explicit capture-range-end=repeat (what rlprof uses when the plan cannot count): nsys writes
    # the reports when the process exits, after finalize; `rlprof relocate` moves them afterwards
    config = verl_config(tmp_path / "out", steps=[1, 2], relocate=True,
                         nsys={"capture_range": "nvtx", "worker_nsight_options": {"capture-range-end": "repeat"}})
    options = windowed_options(config, expected=2)
    assert options["capture-range-end"] == "repeat"
    (result,) = profile_loops(tmp_path / "run", (spec(config, run_steps=(1, 2, 3)), options))
    at_finalize = {r["window"]: r for r in nsys_files(tmp_path / "out")}
    assert {w: r["kind"] for w, r in at_finalize.items()} == {1: "pending", 2: "pending"}
    proc = subprocess.run([sys.executable, "-m", "rlprof.cli", "relocate", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = next((tmp_path / "out").iterdir())
    moved = {r["window"]: r for r in nsys_files(tmp_path / "out") if r["kind"] == "file"}
    assert set(moved) == {1, 2}
    for window, step in ((1, 1), (2, 2)):
        assert ranges(run_dir / moved[window]["path"]) == {"rlprof_capture": 1, f"step{step}": 1,
                                                           "ref_compute_log_prob": 1, "actor_update": 1}
    assert not list((tmp_path / "run").glob("*.nsys-rep"))


def test_discrete_windows_one_report_per_region(tmp_path):
    config = verl_config(tmp_path / "out", steps=[2], mode="discrete", relocate=True, nsys={"capture_range": "nvtx"})
    (result,) = profile_loops(tmp_path / "run", (spec(config, run_steps=(1, 2, 3)), windowed_options(config, expected=2)))

    assert result["windows_opened"] == result["expected_captures"] == 2
    files = sorted(nsys_files(tmp_path / "out"), key=lambda r: r["window"])
    assert [(r["capture"], r["region"]) for r in files] == [("step2.ref_compute_log_prob", "ref_compute_log_prob"),
                                                            ("step2.actor_update", "actor_update")]
    run_dir = next((tmp_path / "out").iterdir())
    for record in files:
        names = ranges(run_dir / record["path"])
        assert set(names) & ROLE_RANGES == {record["region"]}
        assert not any(STEP.match(n) and n != "step2" for n in names)


def test_whole_process_report_holds_profiled_steps_on_the_selected_rank_only(tmp_path):
    # nsys records the whole process (no capture range): rlprof's ranges must be there for steps 1 and 3
    # of the selected rank and nowhere else
    config = verl_config(tmp_path / "out", steps=[1, 3], ranks=[1])
    plain = {"trace": "nvtx", "sample": "none", "cpuctxsw": "none"}
    unselected, selected = profile_loops(tmp_path / "run", (spec(config, rank=0, world_size=2), plain),
                                         (spec(config, rank=1, world_size=2), plain))
    reports = {int(p.name.split("_")[1].split(".")[0]): p for p in (tmp_path / "run").glob("*.nsys-rep")}
    assert set(reports) == {unselected["pid"], selected["pid"]}
    assert ranges(reports[selected["pid"]]) == {"step1": 1, "step3": 1, "ref_compute_log_prob": 2, "actor_update": 2}
    assert ranges(reports[unselected["pid"]]) == {}


def run_demo(tmp_path: Path, *flags: str) -> tuple[Path, list[dict], str]:
    save = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "rlprof.cli", "demo", "--tool", "nsys", "--workers", "2",
                           "--save-path", str(save), *flags],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    (run_dir,) = [p for p in save.iterdir() if p.is_dir()]
    return run_dir, list(read_records([run_dir])), output


def reports_by_process(run_dir: Path, records: list[dict]) -> dict[int, list[dict]]:
    by_rank: dict[int, list[dict]] = {}
    for r in records:
        if r.get("type") == "artifact" and r.get("backend") == "nsys":
            assert r["kind"] == "file", r  # moved into the run, not left pending
            assert (run_dir / r["path"]).is_file()
            by_rank.setdefault(r["rank"], []).append(r)
    return by_rank


@pytest.mark.slow
def test_demo_end_to_end_on_the_selected_rank(tmp_path):
    heavy('an rlprof demo')
    run_dir, records, output = run_demo(tmp_path, "--ranks", "1", "--steps", "1,2")
    by_rank = reports_by_process(run_dir, records)
    assert set(by_rank) == {1}  # rank 0 is not selected: it runs without nsys
    expected = {r["rank"]: r["expected_captures"] for r in records if r.get("type") == "process"}
    assert len(by_rank[1]) == expected[1] == 2
    for record in by_rank[1]:
        names = ranges(run_dir / record["path"])
        assert set(names) - {"rlprof_capture"} == {f"step{record['step']}"} | DEMO_ROLE_RANGES
    # rlprof report shows each report's NVTX summary (C7: the backend's report_details hook)
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(run_dir)], capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stdout + report.stderr
    assert report.stdout.count("NVTX rlprof:actor_update") == 2


@pytest.mark.slow
def test_demo_discrete_one_report_per_role_region(tmp_path):
    heavy('an rlprof demo')
    run_dir, records, _ = run_demo(tmp_path, "--discrete", "--steps", "2", "--train-steps", "2")
    by_rank = reports_by_process(run_dir, records)
    expected = {r["rank"]: r["expected_captures"] for r in records if r.get("type") == "process"}
    assert set(by_rank) == {0, 1}
    for rank, files in by_rank.items():
        assert len(files) == expected[rank] == len(DEMO_ROLE_RANGES)
        regions = []
        for record in files:
            names = set(ranges(run_dir / record["path"])) & DEMO_ROLE_RANGES
            assert names == {record["region"]}
            regions.append(record["region"])
        assert sorted(regions) == sorted(DEMO_ROLE_RANGES)


@pytest.mark.slow
def test_demo_on_two_simulated_nodes_every_report_reaches_the_controllers_layout(tmp_path):
    # capture-range-end=repeat: nsys writes every report when the worker exits, after finalize, into Ray's
    # nsight folder of that node. The demo ends its workers, the controller's after-exit step relocates
    # the reports on each node, and gather: traces streams them to the controller's save path: no
    # `rlprof relocate`, no copying by hand
    heavy('an rlprof demo')
    save = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "rlprof.cli", "demo", "--tool", "nsys", "--workers", "2", "--nodes", "2",
                           "--save-path", str(save), "global_profiler.gather=traces", "global_profiler.gather_delete_local=true",
                           "+global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range-end=repeat"],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "files written at exit moved into the run" in proc.stdout
    (run_dir,) = [p for p in save.iterdir() if p.is_dir()]
    records = list(read_records([save]))
    gathered = {r["path"]: r for r in records if r.get("type") == "gathered"}
    reports = [r for r in records if r.get("type") == "artifact" and r.get("backend") == "nsys" and r["kind"] == "file"]
    assert len(reports) == 4 and len({r["_manifest"] for r in reports}) == 2  # 2 steps x 2 ranks, one rank per node
    assert all(r.get("relocated_from") for r in reports)  # moved after the workers exited
    assert len({r["node"] for r in records if r.get("type") == "node"}) == 2
    for r in reports:
        assert gathered[r["path"]]["status"] == "verified"
        assert set(ranges(run_dir / r["path"])) >= {f"step{r['step']}", "actor_update"}
    assert not list((tmp_path / "demo-nodes").rglob("*.nsys-rep"))  # verified, then deleted on the nodes
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(save)], capture_output=True, text=True,
                            timeout=120)
    assert "problems: none" in report.stdout and report.stdout.count("NVTX rlprof:actor_update") == 4
