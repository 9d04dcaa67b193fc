"""On a CUDA machine: real cudaProfilerStart/Stop windows with the NVTX ranges inside them, and, where
Nsight Systems is installed, the reports nsys really writes (one per window) and their relocation.

Skipped without CUDA (the whole module) and without ``nsys`` on PATH (the last test).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from nsys_harness import SCENARIO_SCRIPT, cuda_available, verl_config
from rlprof.ray import worker_options
from rlprof_nsys import relocate_pending
from rlprof_nsys.launch import command_options

pytestmark = pytest.mark.cuda

REGIONS = [["ref", "compute_log_prob", 2], ["actor", "update", 2]]
STAGES = {"actor": ["update"], "ref": ["compute_log_prob"]}


@pytest.fixture(autouse=True)
def needs_cuda():
    if not cuda_available():
        pytest.skip("needs a CUDA device")


def spec(config):
    return {"config": config, "roles": ["actor", "ref"], "stages": STAGES, "run_steps": [1, 2, 3],
            "regions": REGIONS, "cuda": True}


def test_windows_really_start_with_the_ranges_inside(profiled, tmp_path):
    config = verl_config(tmp_path / "out", steps=[1, 3], mode="discrete")
    (loop,) = profiled(spec(config))
    assert loop.result["errors"] == []
    assert loop.result["windows_started"] == loop.result["windows_opened"] == loop.result["expected_captures"] == 4
    assert loop.recording.outline() == [("step1", ["ref_compute_log_prob", "actor_update"]),
                                        ("step3", ["ref_compute_log_prob", "actor_update"])]


def test_nsys_writes_one_report_per_window_and_they_are_relocated(tmp_path):
    nsys = shutil.which("nsys")
    if nsys is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH")
    reports = tmp_path / "nsight"
    reports.mkdir()
    config = verl_config(tmp_path / "out", steps=[1, 3], mode="discrete", relocate=True,
                         nsys={"ray_nsight_dir": str(reports), "worker_nsight_options": {"trace": "cuda,nvtx"}})
    spec_file, result_file = tmp_path / "spec.json", tmp_path / "result.json"
    spec_file.write_text(json.dumps(spec(config)))

    nsight = worker_options(config, 0, 1, ("actor", "ref"), STAGES)["runtime_env"]["nsight"]
    assert nsight["capture-range-end"] == "repeat-shutdown:4"
    # what Ray's nsight plugin runs: nsys profile <options> -o <nsight dir>/worker_process_%p python ...
    command = [nsys, "profile", *command_options(nsight), "-o", str(reports / "worker_process_%p"),
               sys.executable, str(SCENARIO_SCRIPT), str(spec_file), str(result_file)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    deadline = time.monotonic() + 120  # with kill=none the worker may outlive nsys' session
    while not result_file.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    pid = json.loads(result_file.read_text())["pid"]
    assert sorted(p.name for p in reports.glob(f"worker_process_{pid}*.nsys-rep")) == \
        [f"worker_process_{pid}.{k}.nsys-rep" for k in (1, 2, 3, 4)]

    outcomes = relocate_pending(tmp_path / "out", settle_seconds=0)
    assert outcomes and all(o.status in ("moved", "done") for o in outcomes), outcomes
    relocated = sorted((tmp_path / "out").rglob("*.nsys-rep"))
    assert len(relocated) == 4

    # the NVTX ranges are in the reports (exported to SQLite by nsys itself)
    names = set()
    for rep in relocated:
        database = rep.with_suffix(".sqlite")
        subprocess.run([nsys, "export", "--type", "sqlite", "--output", str(database), str(rep)],
                       check=True, capture_output=True, timeout=300)
        with sqlite3.connect(database) as db:
            names |= {row[0] for row in db.execute(
                "SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId")}
    assert {"ref_compute_log_prob", "actor_update"} <= names
