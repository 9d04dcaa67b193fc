"""The third party as a fixture: ``examples/rlprof-pyspy`` (py-spy run as a subprocess per capture),
installed through its entry point. It passes the whole kit, the blocked-signals scenario included;
a variant that starts py-spy without lifting the blocked signals fails that scenario; without py-spy
its captures are skipped with the reason, which the verdict shows as explained, not missing; and it
runs under a real ``rlprof demo`` on Ray with verdict ok."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof.analysis.report import build_reports, verdict
from rlprof.testing.conformance import SCENARIOS, Conformance, check_backend
from tiers import heavy  # tests/tiers.py

REGION_S = 0.3
"""Long enough for py-spy to attach and take samples in every region."""


def test_found_through_its_entry_point_and_declares_contract_1(pyspy_backend):
    from rlprof.runtime.registry import backend_info
    from rlprof.installed import discover

    info = backend_info("pyspy", discover()["pyspy"])
    assert info["imports"], info.get("error")
    assert (info["distribution"], info["contract"], info["contract_declared"]) == ("rlprof-pyspy", 1, True)
    assert {"start_step", "start_role", "stop_role", "step_boundary", "finalize"} <= set(info["hooks"])


def test_one_speedscope_profile_per_capture_written_on_a_ray_like_thread(pyspy_backend, rlprof_run):
    run = rlprof_run("pyspy", mode="discrete", steps=(1,), roles=("actor", "ref"), blocked_signals=True,
                     region_s=REGION_S)
    assert not run.errors and not run.skipped, (run.errors, run.skipped)
    profiles = {a["capture"]: run.run_dir / a["path"] for a in run.artifacts if a["path"].endswith(".speedscope.json")}
    assert set(profiles) == {"step1.actor_update", "step1.ref_compute_log_prob"}
    for path in profiles.values():
        assert path.parent.name == "pyspy"  # <capture>/<process>/<backend>/
        profile = json.loads(path.read_text())
        assert profile["profiles"] and any(p["samples"] for p in profile["profiles"]), path


@pytest.mark.slow
def test_passes_the_whole_conformance_kit(pyspy_backend):
    report = check_backend("pyspy", region_s=REGION_S)
    assert "blocked_signals" in report.runs


def _masked_variant():
    from rlprof_pyspy.backend import PySpyBackend

    class SignalMaskedPySpy(PySpyBackend):
        """Starts py-spy without lifting the signals Ray's actor threads block: the bug the kit must catch."""
        unblock_signals = False

    return SignalMaskedPySpy


@pytest.mark.slow
def test_a_variant_that_ignores_the_signal_mask_fails_the_blocked_signals_scenario(pyspy_backend, tmp_path):
    conformance = Conformance(_masked_variant(), name="pyspy", tool_config={"stop_timeout_s": 2}, region_s=REGION_S,
                              hook_timeout_s=1)
    plain = conformance.check("discrete", tmp_path / "plain")
    assert plain.ok, plain.explain()  # on a plain main thread the bug does not show
    blocked = conformance.check("blocked_signals", tmp_path / "blocked")
    assert not blocked.ok
    explained = blocked.explain()
    assert "stop_role hook made training wait" in explained and "Subprocess backends" in explained
    skipped = blocked.runs["blocked_signals"].skipped
    assert skipped and all("did not stop within 2 s of SIGINT and was killed" in r["reason"] for r in skipped), skipped


def test_without_py_spy_every_capture_is_skipped_with_the_reason_and_nothing_is_missing(pyspy_backend, rlprof_run,
                                                                                          monkeypatch):
    import rlprof_pyspy.backend

    monkeypatch.setattr(rlprof_pyspy.backend, "find_py_spy", lambda: None)  # as on a machine without it
    run = rlprof_run("pyspy", mode="discrete", steps=(1, 2), roles=("actor",))
    assert not run.errors and not run.artifacts
    assert [(s["capture"], s["reason"]) for s in run.skipped] == [
        ("step1.actor_update", "py-spy is not installed (pip install py-spy)"),
        ("step2.actor_update", "py-spy is not installed (pip install py-spy)")]
    [report] = build_reports([run.run_dir])
    assert report.missing == [] and report.short_captures == []
    lines = verdict([run.run_dir]).lines
    assert ("skipped: rank 0: pyspy captures step1.actor_update, step2.actor_update: py-spy is not installed "
            "(pip install py-spy)") in lines
    assert any(line.startswith("nothing captured: ") and "py-spy is not installed" in line for line in lines), lines


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["e2e", "discrete"])
def test_rlprof_demo_on_ray_with_pyspy_ends_with_verdict_ok_and_pyspy_hints(pyspy_backend, tmp_path, mode):
    heavy('an rlprof demo')
    pytest.importorskip("ray")
    save = tmp_path / "demo"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pyspy_backend), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "rlprof.cli", "demo", "--tool", "pyspy", "--workers", "2", "--steps", "1",
               "--save-path", str(save)] + (["--discrete"] if mode == "discrete" else [])
    proc = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path, env=env)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "rlprof demo: ok" in out and "ok: every profiled step x role x rank produced output" in out
    assert "py-spy profiles (.speedscope.json): open in https://www.speedscope.app" in out
    said = [line for line in out.splitlines() if ("skipped:" in line or "warning:" in line)
            and "warning: profiling took" not in line]  # the verdict's cost warning is the core's, not the backend's
    assert not said, out[-4000:]  # py-spy attached before every region began
    assert ".pt.trace.json.gz" not in out and "--with-traces" not in out  # no torch hints for a pyspy-only run
    [report] = build_reports([save])
    profiles = [f for f in report.files if f.path.endswith(".speedscope.json")]
    assert {f.rank for f in profiles} == {0, 1} and all(f.size > 0 and f.exists for f in profiles)
    captures = {f.capture for f in profiles}
    assert captures == {"step1"} if mode == "e2e" else (captures and all(c.startswith("step1.") for c in captures))
