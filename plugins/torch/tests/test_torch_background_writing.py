"""Traces are exported and compressed off the training thread: the step does not wait for it, finalize does (up to
a limit), a file appears under its final name only whole, and a process killed mid-export leaves the
report naming the capture that was cut."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import rlprof
from rlprof.layout import reserved
from rlprof.cli import main as rlprof_cli
from rlprof.manifest import read_records
from rlprof.runtime import trace_writer
from rlprof_torch import writer


@pytest.fixture
def held_writer(monkeypatch):
    """The process writer's compression held until ``release.set()``: the test sees what the step
    and finalize do while a trace is still being written."""
    release, started = threading.Event(), threading.Event()
    real = trace_writer.compress

    def held(export):
        started.set()
        release.wait(30)
        real(export)

    monkeypatch.setattr(trace_writer, "compress", held)
    yield release, started
    release.set()


def artifact_records(run_dir):
    return [r for r in read_records([run_dir]) if r["type"] == "artifact"]


def test_after_finalize_every_trace_loads_and_its_record_is_right(run_training, read_trace):
    run = run_training(steps=(1, 2, 3))
    assert [a["capture"] for a in run.artifacts] == ["step1", "step2"]
    for record in run.artifacts:
        path = run.run_dir / record["path"]
        data = path.read_bytes()
        trace = json.loads(gzip.decompress(data))  # a whole gzip member of Chrome JSON
        assert trace["rlprof"]["capture"] == record["capture"] and trace["traceEvents"]
        assert record["state"] == "written" and record["size"] == len(data) > 0
        assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert not list(run.run_dir.rglob("*.partial")) and not list(run.run_dir.rglob(".rlprof-scratch-*"))
    lines = [json.loads(line) for manifest in (run.run_dir / "manifest").iterdir() for line in manifest.open()]
    states = [(r["capture"], r["state"]) for r in lines if r["type"] == "artifact"]  # on disk: listed at close, then written
    assert sorted(states) == [("step1", "writing"), ("step1", "written"), ("step2", "writing"), ("step2", "written")]
    assert [(r["capture"], r["state"]) for r in artifact_records(run.run_dir)] == [("step1", "written"), ("step2", "written")]


def test_the_step_does_not_wait_for_compression(make_config, held_writer):
    release, started = held_writer
    prof = rlprof.Profiler(make_config(steps=(1,)), roles=("actor", "ref"))
    prof.start_step(1)
    with prof.role("actor", "update"):
        sum(range(1000))
    prof.step_boundary()  # returns although the trace cannot be compressed yet
    assert started.wait(10)
    assert not list(prof.run.run_dir.rglob("*.pt.trace.json"))  # nor exported: the writer's thread does that too
    [listed] = artifact_records(prof.run.run_dir)
    final = prof.run.run_dir / listed["path"]
    assert listed["state"] == "writing" and not final.exists()
    release.set()
    [record] = prof.finalize()
    assert record["state"] == "written" and record["size"] == final.stat().st_size > 0


@pytest.mark.timing
def test_finalize_waits_up_to_its_limit_and_says_what_it_left_unfinished(make_config, held_writer, monkeypatch):
    release, _ = held_writer
    monkeypatch.setenv(writer.WAIT_ENV, "0.2")
    prof = rlprof.Profiler(make_config(steps=(1,)), roles=("actor", "ref"))
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()
    began = time.monotonic()
    [record] = prof.finalize()
    assert time.monotonic() - began < 10
    assert record["state"] == "writing"  # the manifest says it was left unfinished
    warnings = [r for r in read_records([prof.run.run_dir]) if r["type"] == "warning"]
    assert any("step1" in w["message"] and writer.WAIT_ENV in w["message"] for w in warnings)


def test_a_trace_finalize_left_unfinished_still_reaches_its_name_if_the_process_lives(make_config, held_writer,
                                                                                     monkeypatch):
    release, _ = held_writer
    monkeypatch.setenv(writer.WAIT_ENV, "0")
    prof = rlprof.Profiler(make_config(steps=(1,)), roles=("actor", "ref"))
    prof.start_step(1)
    with prof.role("actor", "update"):
        sum(range(1000))
    prof.step_boundary()
    [record] = prof.finalize()
    assert record["state"] == "writing"
    release.set()  # the process goes on: the export its finalize did not wait for completes
    assert trace_writer.process_writer().wait_idle(30)
    final = prof.run.run_dir / record["path"]
    assert json.loads(gzip.decompress(final.read_bytes()))["rlprof"]["capture"] == "step1"
    assert not list(prof.run.run_dir.rglob("*.partial")) and not list(prof.run.run_dir.rglob(".rlprof-scratch-*"))


def test_a_trace_that_cannot_be_written_is_an_error_and_listed_failed(make_config, monkeypatch, capsys):
    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reserved, "place", disk_full)  # where a reserved name is placed
    prof = rlprof.Profiler(make_config(steps=(1,)), roles=("actor", "ref"))
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()  # the step goes on; the failure comes out of the next hook call, finalize here
    [record] = prof.finalize()
    assert record["state"] == "failed" and "No space left" in record["error"]
    assert not (prof.run.run_dir / record["path"]).exists() and not list(prof.run.run_dir.rglob("*.partial"))
    [error] = prof.errors
    assert error["backend"] == "torch" and "step1" in error["error"] and record["path"] in error["error"]
    rlprof_cli(["report", str(prof.run.run_dir)])
    assert "could not be written: OSError: [Errno 28] No space left on device" in capsys.readouterr().out


def test_a_bad_wait_limit_is_an_error_naming_the_variable():
    with pytest.raises(rlprof.ConfigError, match=writer.WAIT_ENV):
        writer.wait_limit_from_env({writer.WAIT_ENV: "soon"})
    assert writer.wait_limit_from_env({writer.WAIT_ENV: "-1"}) == 0.0
    assert writer.wait_limit_from_env({}) == writer.DEFAULT_WAIT_S


KILLED_MID_EXPORT = textwrap.dedent("""
    import json, sys, time
    import rlprof
    from rlprof.runtime import trace_writer

    ready = sys.argv[2]

    def stuck(source, target, length):  # compress one block, then hang: the process is killed here
        target.write(source.read(length))
        target.flush()
        open(ready, "w").close()
        time.sleep(600)

    trace_writer.shutil.copyfileobj = stuck
    prof = rlprof.Profiler(json.loads(sys.argv[1]), roles=("actor", "ref"), run_id="killed")
    prof.start_step(1)
    with prof.role("actor", "update"):
        sum(range(100000))
    prof.step_boundary()
    print("step returned", flush=True)
    time.sleep(600)
""")


@pytest.mark.timing
def test_a_process_killed_mid_export_leaves_no_broken_trace_and_the_report_names_the_cut(make_config, tmp_path, capsys):
    ready = tmp_path / "ready"
    child = subprocess.Popen([sys.executable, "-c", KILLED_MID_EXPORT, json.dumps(make_config(steps=(1,))), str(ready)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.poll() else "timeout"
            time.sleep(0.05)
        assert child.stdout.readline().strip() == "step returned"  # the step did not wait for the export
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.communicate()
    run_dir = tmp_path / "profile" / "killed"
    assert list(run_dir.rglob("*.partial"))  # what was being written is under a temporary name only
    for trace in run_dir.rglob("*.json.gz"):
        json.loads(gzip.decompress(trace.read_bytes()))  # nothing under a final name fails to load
    assert not list(run_dir.rglob("*.json.gz"))
    rlprof_cli(["report", str(run_dir)])
    out = capsys.readouterr().out
    assert "cut: rank 0" in out and "torch capture step1" in out and "was still being written" in out


def budget_run(make_config, budget: dict, settle: bool):
    """Steps 1-4 profiled under ``budget`` (``global_profiler`` keys); ``settle``: each trace is in place
    before the next step begins (as after any real step's work), else the steps follow at once."""
    config = make_config(steps=(1, 2, 3, 4), torch_config={"flops": False})  # no peak to measure at the first capture
    config["global_profiler"].update(budget)
    prof = rlprof.Profiler(config, roles=("actor", "ref"))
    for step in (1, 2, 3, 4):
        prof.start_step(step)
        with prof.role("actor", "update"):
            sum(range(1000))
        prof.step_boundary()
        if settle:
            assert trace_writer.process_writer().wait_idle(30)
    prof.finalize()
    records = list(read_records([prof.run.run_dir]))
    return ([r["capture"] for r in records if r["type"] == "artifact" and r["state"] == "written"],
            sorted({r["step"] for r in records if r["type"] == "skip"}), records)


def test_a_capture_over_its_budget_written_in_the_background_skips_the_next_steps(make_config):
    # The trace's size is known once the writer has put it in place: the next profiled step finds it there.
    captured, skipped, records = budget_run(make_config, {"capture_budget_mb": 0.0001}, settle=True)
    assert captured == ["step1"] and skipped == [2, 3, 4]
    [skip, *_] = [r for r in records if r["type"] == "skip"]
    assert skip["budget"] == "capture_budget_mb" and skip["measured_bytes"] > 105 and "step1" in skip["reason"]


def test_the_next_step_waits_for_a_trace_still_being_written_where_the_capture_budget_turns_on_it(make_config, held_writer):
    release, _ = held_writer
    threading.Timer(0.3, release.set).start()  # step 1's trace is still being written as step 2 begins
    captured, skipped, records = budget_run(make_config, {"capture_budget_mb": 0.0001}, settle=False)
    assert captured == ["step1"] and skipped == [2, 3, 4]
    [wait] = [r for r in records if r["type"] == "profiling_wait"]  # profiling's cost, in the report
    assert wait["source"] == "budget" and wait["step"] == 2 and wait["ms"] >= 100
