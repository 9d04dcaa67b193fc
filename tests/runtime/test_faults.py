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
    records = list(read_records([save_path]))
    errors = [r for r in records if r["type"] == "error"]
    assert [(e["backend"], e["hook"], e["rank"], e["kind"]) for e in errors] == [("faulty", hook, 0, "hook")]
    assert "faulty backend fails in" in errors[0]["error"]
    # released: what it had open was closed for it, then its finalize ran once (or it failed in finalize itself)
    faulty = prof.backends.plugins["faulty"]
    finalizes = [f for h, f in faulty.calls if h == "finalize"]
    assert len(finalizes) == (0 if hook == "finalize" else 1) and faulty.open_captures() == []
    cleanups = [r for r in records if r["type"] == "cleanup"]
    if hook == "finalize":
        assert cleanups == []
    else:
        assert [(c["backend"], c["closed"], c["finalized"]) for c in cleanups] == [("faulty", [] if hook == "step_boundary" else ["step1"], True)]


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


# --------------------------------------------------------------------------- contained calls and writes (issue 13)


def recorder_profiler(save_path, *extra, backends=None, roles=("actor",)):
    return rlprof.Profiler(None, rank=0, world_size=1, roles=roles, backends=backends, overrides=[
        "global_profiler.tool=[odd,recorder]" if backends else "global_profiler.tool=recorder",
        f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])


def loop(prof, steps=(1, 2, 3)):
    done = []
    for step in steps:
        prof.start_step(step)
        with prof.role("actor", "update"):
            done.append(step)
        prof.step_boundary()
    prof.finalize()
    return done


def test_a_full_disk_never_stops_training_and_is_recorded_once_writing_works(test_backends, save_path, caplog, monkeypatch):
    from rlprof.manifest import writer as manifest

    prof = recorder_profiler(save_path)
    session = prof._session
    prof.start_step(1)
    with monkeypatch.context() as full, caplog.at_level(logging.ERROR, logger="rlprof"):
        # the disk fills: the open manifest and every reopening of it write to /dev/full (ENOSPC)
        full.setattr(manifest, "_open_append", lambda path, root: open("/dev/full", "w", buffering=1))
        session.manifest.close()
        with prof.role("actor", "update"):
            pass
        prof.step_boundary()  # must not raise: the artifact, step and region records are lost
    assert session.manifest.lost >= 3
    told = [r for r in caplog.records if "cannot write the manifest" in r.getMessage()]
    assert len(told) == 1 and "No space left on device" in told[0].getMessage()
    assert loop(prof, steps=(2,)) == [2]  # the next write reopens the file and works
    records = list(read_records([save_path]))
    [lost] = [r for r in records if r["type"] == "error" and r["kind"] == "write"]
    assert lost["lost"] >= 3 and "No space left on device" in lost["error"]
    assert [a["step"] for a in records if a["type"] == "artifact"] == [2]


class Odd:
    """Returns what is not a path, lists an artifact with fields reserved for the core, has a broken check."""

    def __init__(self):
        self.calls = []

    @rlprof.hookimpl
    def check_environment(self):
        raise OSError("cannot read /proc/driver/odd")

    @rlprof.hookimpl
    def start_step(self, ctx):
        self.calls.append("start_step")
        return 42

    @rlprof.hookimpl
    def stop_role(self, ctx):
        self.calls.append("stop_role")
        path = ctx.output_dir() / "odd.txt"
        path.write_text("x")
        if ctx.step == 2:
            ctx.add_artifact(path, rank=99, type="error")
        return None

    @rlprof.hookimpl
    def finalize(self, ctx):
        self.calls.append(f"finalize:{ctx.reason}")


def test_bad_returns_reserved_fields_and_a_raising_check_are_recorded_not_raised(test_backends, save_path):
    from rlprof.testing import RecordingBackend

    odd = Odd()
    prof = recorder_profiler(save_path, backends={"odd": odd, "recorder": RecordingBackend()})
    assert "check_environment raised OSError: cannot read /proc/driver/odd" in prof.environment["odd"][0]
    assert loop(prof) == [1, 2, 3]
    records = list(read_records([save_path]))
    errors = [(r["backend"], r["hook"], r["kind"]) for r in records if r["type"] == "error"]
    assert errors == [("odd", "check_environment", "environment"), ("odd", "start_step", "return"),
                      ("odd", "start_step", "return"), ("odd", "stop_role", "hook")]
    returned = [r["error"] for r in records if r["type"] == "error" and r["kind"] == "return"][0]
    assert "start_step returned 42 (int)" in returned
    refused = [r["error"] for r in records if r["type"] == "error" and r["kind"] == "hook"][0]
    assert "ValueError: ctx.add_artifact: rank, type are filled by rlprof's core" in refused
    assert {r["rank"] for r in records} == {0}  # no record claims to be rank 99
    assert odd.calls[-1] == "finalize:released"  # released after the refused add_artifact
    assert [a["path"].rsplit("/", 1)[1] for a in records if a["type"] == "artifact" and a["backend"] == "recorder"] == [
        "calls.json", "calls.json"]


@pytest.mark.parametrize("raise_at", [1, 2])
def test_a_region_raising_in_the_last_iteration_of_a_window_reaches_stop_role_with_the_error(test_backends, save_path, raise_at):
    prof = recorder_profiler(save_path, "actor_rollout_ref.actor.profiler.schedule.active=3",
                             "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true")
    prof.start_step(1)
    with pytest.raises(KeyError):
        with prof.role("actor", "update"):
            for index in range(3):
                with prof.iteration():
                    if index == raise_at:
                        raise KeyError("micro-batch")
    prof.step_boundary()
    prof.finalize()
    stops = [f for h, f in prof.backends.plugins["recorder"].calls if h == "stop_role"]
    assert [(f["iterations"], f["error"], f["closes"]) for f in stops] == [((0, raise_at), "KeyError", True)]
    [region] = [r for r in read_records([save_path]) if r["type"] == "region"]
    assert region["error"] == "KeyError: 'micro-batch'" and region["iterations"] == [0, raise_at]


EXIT_SCRIPT = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, {site!r})
    import rlprof

    class Sampler:
        # Its non-daemon thread runs until finalize stops it: exit must finalize before joining threads.
        def __init__(self):
            self.stop = threading.Event()
        @rlprof.hookimpl
        def start_step(self, ctx):
            threading.Thread(target=self.stop.wait, name="sampler").start()
        @rlprof.hookimpl
        def finalize(self, ctx):
            self.stop.set()

    prof = rlprof.Profiler(None, roles=("actor",), backends={{"sampler": Sampler()}}, overrides=[
        "global_profiler.tool=sampler", "global_profiler.save_path={save}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    print("started", flush=True)
""")


def test_exit_finalizes_before_python_waits_for_a_backends_non_daemon_thread(test_backends, save_path):
    code = EXIT_SCRIPT.format(site=str(test_backends), save=save_path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "started", proc.stderr
    assert [r["reason"] for r in read_records([save_path]) if r["type"] == "finalized"] == ["exit"]


SIGTERM_DURING_EXIT_SCRIPT = textwrap.dedent("""
    import os, signal
    import rlprof
    from rlprof.runtime import exits

    class Quiet:
        @rlprof.hookimpl
        def start_step(self, ctx):
            pass

    prof = rlprof.Profiler(None, roles=("actor",), backends={{"quiet": Quiet()}}, overrides=[
        "global_profiler.tool=quiet", "global_profiler.save_path={save}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    with exits._lock:  # where finalize_all is when SIGTERM comes (a pool terminating its forked worker at exit)
        os.kill(os.getpid(), signal.SIGTERM)
        print("handler returned", flush=True)
""")


def test_sigterm_while_exit_finalizes_ends_the_process_instead_of_hanging(save_path):
    code = SIGTERM_DURING_EXIT_SCRIPT.format(save=save_path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert [r["reason"] for r in read_records([save_path]) if r["type"] == "finalized"] == ["signal"]


def test_timing_records_cover_steps_and_every_region_with_nesting(test_backends, save_path):
    prof = recorder_profiler(save_path, roles=("actor", "ref"))
    for step in (1, 2, 3):
        prof.start_step(step)
        with prof.role("actor", "update"):
            with prof.role("ref", "compute_log_prob"):
                pass
        prof.step_boundary()
    prof.finalize()
    records = list(read_records([save_path]))
    steps = [r for r in records if r["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2]
    regions = [r for r in records if r["type"] == "region"]
    assert [(r["step"], r["role"], r["region"], r["parent"], r["depth"], r["capture"]) for r in regions] == [
        (1, "ref", "ref_compute_log_prob", "actor_update", 1, "step1"), (1, "actor", "actor_update", None, 0, "step1"),
        (2, "ref", "ref_compute_log_prob", "actor_update", 1, "step2"), (2, "actor", "actor_update", None, 0, "step2")]
    for record in steps + regions:
        assert record["end_ns"] >= record["start_ns"] > 0
        assert record["duration_ms"] == pytest.approx((record["end_ns"] - record["start_ns"]) / 1e6)
    for region in regions:
        step = steps[region["step"] - 1]
        assert step["start_ns"] <= region["start_ns"] <= region["end_ns"] <= step["end_ns"]


def test_a_hook_running_past_the_watchdog_limit_is_reported_while_training_waits(test_backends, save_path, monkeypatch):
    pytest.importorskip("rlprof.runtime.watchdog", reason="the hook watchdog (rlprof.runtime.watchdog, issue 13) is not in this tree yet")
    import time

    monkeypatch.setenv("RLPROF_HOOK_TIMEOUT_S", "0.2")

    class Slow:
        @rlprof.hookimpl
        def start_step(self, ctx):
            time.sleep(1.0)

    prof = rlprof.Profiler(None, roles=("actor",), backends={"slow": Slow()}, overrides=[
        "global_profiler.tool=slow", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    prof.start_step(1)
    prof.step_boundary()
    prof.finalize()
    [timeout] = [r for r in read_records([save_path]) if r["type"] == "error" and r["kind"] == "timeout"]
    assert (timeout["backend"], timeout["hook"]) == ("slow", "start_step") and "time.sleep" in timeout["stack"]


def test_a_backend_raising_between_sampled_iterations_is_released_and_the_others_go_on(test_backends, save_path):
    prof = profiler(save_path, "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in=[iteration_boundary]",
                    "actor_rollout_ref.actor.profiler.schedule.active=3")
    for step in (1, 2, 3):
        prof.start_step(step)
        with prof.role("actor", "update"):
            for _ in range(3):
                with prof.iteration():
                    pass
        prof.step_boundary()
    prof.finalize()
    faulty = prof.backends.plugins["faulty"]
    # released inside step 1's window: its range closed, then the step capture, then finalize once
    assert faulty.sequence()[-3:] == ["stop_role:actor_update", "step_boundary:1-", "finalize:None"]
    assert faulty.open_captures() == []
    records = list(read_records([save_path]))
    assert [(c["closed"], c["finalized"]) for c in records if c["type"] == "cleanup"] == [(["step1"], True)]
    recorder = [a["steps"] for a in prof.artifacts if a["backend"] == "recorder"]
    assert recorder == [[1], [2]]
