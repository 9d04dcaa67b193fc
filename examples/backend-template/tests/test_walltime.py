"""rlprof-walltime's tests: found through its entry point, writes the traces it promises, keeps the
rlprof backend contract. Run them with the package installed: ``pip install -e . && pytest``.

The ``rlprof_run`` fixture comes from rlprof's pytest plugin (installed with rlprof; nothing to import).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from rlprof.testing.conformance import BackendConformance

NAME = "walltime"


def test_found_through_its_entry_point():
    eps = {ep.name: ep for ep in metadata.entry_points(group="rlprof.backends")}
    assert NAME in eps, f"no {NAME!r} in the rlprof.backends entry points: install the package (pip install -e .)"
    assert eps[NAME].value == "rlprof_walltime.backend:WalltimeBackend"
    assert eps[NAME].dist.metadata["Name"] == "rlprof-walltime"


def test_listed_by_rlprof_backends():
    command = shutil.which("rlprof", path=str(Path(sys.executable).parent)) or "rlprof"
    listing = subprocess.run([command, "backends", "--json"], capture_output=True, text=True, check=True)
    info = {b["name"]: b for b in json.loads(listing.stdout)}[NAME]
    assert info["imports"], info.get("error")
    assert info["distribution"] == "rlprof-walltime"
    assert {"start_step", "start_role", "stop_role", "step_boundary", "finalize"} <= set(info["hooks"])


def test_one_chrome_trace_per_capture(rlprof_run):
    run = rlprof_run(NAME, mode="discrete", steps=(1,), roles=("actor", "ref"), raise_in="actor")
    assert run.caught is run.raised
    by_capture = {a["capture"]: run.run_dir / a["path"] for a in run.artifacts}
    assert sorted(by_capture) == ["step1.actor_update", "step1.ref_compute_log_prob"]
    events = json.loads(by_capture["step1.actor_update"].read_text())["traceEvents"]
    [region] = [e for e in events if e["ph"] == "X"]
    assert region["name"] == "actor_update" and region["dur"] >= 0
    assert region["args"]["error"].startswith("ScriptedFailure")


def test_end_to_end_trace_holds_the_step_its_regions_and_iterations(rlprof_run):
    run = rlprof_run(NAME, mode="e2e", steps=(1,), roles=("actor",), iterations=3, schedule={"active": 3})
    [trace] = run.artifact_paths()
    events = json.loads(trace.read_text())["traceEvents"]
    assert sorted(e["name"] for e in events if e["ph"] == "X") == ["actor_update", "step 1"]
    assert [e["name"] for e in events if e["ph"] == "i"] == ["actor_update iteration 0", "actor_update iteration 1"]


def test_iteration_marks_can_be_switched_off(rlprof_run):
    run = rlprof_run(NAME, steps=(1,), roles=("actor",), iterations=3, schedule={"active": 3},
                     tool_config={"iterations": False})
    [trace] = run.artifact_paths()
    assert not [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "i"]


class TestWalltimeKeepsTheContract(BackendConformance):
    backend = NAME  # by entry-point name: the suite loads it the way the core does
