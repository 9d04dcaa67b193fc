"""Fault isolation: a backend that raises, a region that raises, a process that ends early."""

import json
import logging
import signal
import subprocess
import sys
import textwrap

import pytest

import rlprof
from rlprof.manifest import read_records

HOOKS = ["start_step", "start_role", "stop_role", "step_boundary", "finalize"]


def profiler(save_path, *extra, tool="[faulty,recorder]", roles=("actor",)):
    return rlprof.Profiler(None, rank=0, world_size=1, roles=roles, overrides=[
        f"global_profiler.tool={tool}", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])


@pytest.mark.parametrize("hook", HOOKS)
def test_backend_raising_in_each_hook_leaves_training_and_others_intact(test_backends, save_path, hook, caplog):
    prof = profiler(save_path, f"actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in=[{hook}]")
    done = []
    with caplog.at_level(logging.ERROR, logger="rlprof"):
        for step in (1, 2, 3):
            prof.start_step(step)
            with prof.role("actor", "update"):
                done.append(step)
            prof.step_boundary()
        prof.finalize()
    assert done == [1, 2, 3]  # the training loop ran every step
    # the other backend's artifacts are complete: one trace per profiled step
    recorder = [a for a in prof.artifacts if a["backend"] == "recorder"]
    assert [a["steps"] for a in recorder] == [[1], [2]]
    assert prof.backends.plugins["recorder"].sequence()[-1] == "finalize:None"
    # logged once with backend, hook and rank; recorded in the manifest; backend skipped afterwards
    logged = [r for r in caplog.records if "backend 'faulty' failed" in r.getMessage()]
    assert len(logged) == 1 and f"in {hook} on rank 0" in logged[0].getMessage()
    errors = [r for r in read_records([save_path]) if r["type"] == "error"]
    assert [(e["backend"], e["hook"], e["rank"]) for e in errors] == [("faulty", hook, 0)]
    assert "faulty backend fails in" in errors[0]["error"]


def test_strict_mode_raises(test_backends, save_path, monkeypatch):
    monkeypatch.setenv("RLPROF_STRICT", "1")
    prof = profiler(save_path, "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in=[start_step]")
    with pytest.raises(RuntimeError, match="faulty backend fails in start_step"):
        prof.start_step(1)


def test_region_that_raises_closes_its_capture_and_reraises(test_backends, save_path):
    prof = profiler(save_path, "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true", tool="recorder")
    prof.start_step(1)

    class Boom(Exception):
        pass

    original = Boom("in the update")
    with pytest.raises(Boom) as info:
        with prof.role("actor", "update"):
            raise original
    assert info.value is original  # unchanged
    prof.step_boundary()
    prof.finalize()
    calls = prof.backends.plugins["recorder"].calls
    stop = [f for h, f in calls if h == "stop_role"][0]
    assert stop["closes"] is True and stop["error"] == "Boom"
    assert [a["capture"] for a in prof.artifacts] == ["step1.actor_update"]


def test_decorated_function_that_raises(test_backends, save_path):
    prof = profiler(save_path, tool="recorder")

    @prof.role("actor", "update")
    def update():
        raise KeyError("x")

    prof.start_step(1)
    with pytest.raises(KeyError):
        update()
    prof.step_boundary()
    prof.finalize()
    assert prof.backends.plugins["recorder"].sequence()[:4] == ["start_step:1+", "start_role:actor_update", "stop_role:actor_update", "step_boundary:1-"]


SCRIPT = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {site!r})
    import rlprof
    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
        "global_profiler.tool=recorder", "global_profiler.save_path={save}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    region = prof.role("actor", "update")
    region.__enter__()
    print("inside", flush=True)
    {ending}
""")


@pytest.mark.parametrize("ending, reason", [
    ("time.sleep(60)", "signal"),
    ("raise KeyboardInterrupt", "exit"),
    ("sys.exit(0)", "exit"),
])
def test_process_ending_mid_step_still_finalizes(test_backends, save_path, ending, reason):
    code = SCRIPT.format(site=str(test_backends), save=save_path, ending=ending)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "inside"
    if reason == "signal":
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    if reason == "signal":
        assert proc.returncode == -signal.SIGTERM  # the default action still happens after finalizing
    records = list(read_records([save_path]))
    finalized = [r for r in records if r["type"] == "finalized"]
    assert [f["reason"] for f in finalized] == [reason]
    artifacts = [r for r in records if r["type"] == "artifact"]
    assert [a["capture"] for a in artifacts] == ["step1"]
    written = json.loads((save_path / artifacts[0]["run"] / artifacts[0]["path"]).read_text())
    hooks = [c[0] for c in written["calls"]]
    assert hooks == ["start_step", "start_role", "stop_role", "step_boundary"]


def test_finalize_is_idempotent(test_backends, save_path):
    prof = profiler(save_path, tool="recorder")
    prof.start_step(1)
    prof.step_boundary()
    first = prof.finalize()
    assert prof.finalize() is first
    assert [h for h, _ in prof.backends.plugins["recorder"].calls].count("finalize") == 1
