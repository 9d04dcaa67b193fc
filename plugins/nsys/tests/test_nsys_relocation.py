"""Relocation of nsys reports from Ray's nsight directory, laid out the way Ray and nsys lay them out:
``<dir>/worker_process_<pid>.<k>.nsys-rep`` for the k-th capture window of process <pid>.

The profiled process runs here (in the test process, so its pid is ours) with a stand-in for
cudaProfilerStart/Stop, as it would on a GPU node, and with ``RLPROF_NSYS_WORKER=1``, which the
worker's runtime_env sets when the controller starts it under nsys.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlprof
from nsys_harness import verl_config
from rlprof.layout import hostname
from rlprof.manifest import read_records
from rlprof_nsys import relocate_pending
from rlprof_nsys.relocation import move_without_overwrite
from rlprof_nsys.reports import running_under_nsys
from rlprof_nsys.windows import CaptureWindows

PID = os.getpid()
LONG_AGO = time.time() - 600


class Driver:
    def start(self):
        pass

    def stop(self):
        pass


def report(directory: Path, name: str, *, finished: bool = True, text: str = "report") -> Path:
    path = directory / name
    path.write_text(text)
    if finished:
        os.utime(path, (LONG_AGO, LONG_AGO))
    return path


def run_three_steps(tmp_path, ray_dir, *, steps=(1, 2, 3), monkeypatch):
    monkeypatch.setenv("RLPROF_STRICT", "1")
    monkeypatch.setenv("RLPROF_NSYS_WORKER", "1")
    config = verl_config(tmp_path / "out", steps=list(steps), relocate=True, nsys={"ray_nsight_dir": str(ray_dir)})
    prof = rlprof.Profiler(config, roles=("actor",), run_id="relocation")
    prof.backends.plugins["nsys"].windows = CaptureWindows(Driver())
    for step in range(1, max(steps) + 1):
        prof.start_step(step)
        with prof.role("actor", "update"):
            pass
        prof.step_boundary()
    return prof


def nsys_records(run_dir: Path) -> list[dict]:
    return [r for r in read_records([run_dir]) if r.get("type") == "artifact" and r.get("backend") == "nsys"]


def test_finalize_moves_finished_reports_and_lists_the_rest_as_pending(tmp_path, monkeypatch):
    ray_dir = tmp_path / "ray" / "logs" / "nsight"
    ray_dir.mkdir(parents=True)
    prof = run_three_steps(tmp_path, ray_dir, monkeypatch=monkeypatch)
    finished = report(ray_dir, f"worker_process_{PID}.1.nsys-rep")
    writing = report(ray_dir, f"worker_process_{PID}.2.nsys-rep", finished=False)
    (ray_dir / f"worker_process_{PID}.2.qdstrm").write_text("stream")
    others = [report(ray_dir, f"worker_process_{PID + 1}.1.nsys-rep"),      # another worker
              report(ray_dir, f"worker_process_{PID}7.1.nsys-rep"),         # a pid that starts with ours
              report(ray_dir, f"worker_process_{PID}.1.sqlite")]            # not a report
    prof.finalize()
    run_dir = prof.run.run_dir
    process = f"rank0-{hostname()}-{PID}"

    moved = run_dir / "step1" / process / "nsys" / finished.name
    assert moved.read_text() == "report" and not finished.exists()
    assert writing.exists() and all(p.exists() for p in others)
    records = {r["kind"] + ":" + str(r.get("window")): r for r in nsys_records(run_dir)}
    assert set(records) == {"file:1", "pending:2", "pending:3"}
    assert records["file:1"]["path"] == f"step1/{process}/nsys/{finished.name}"
    assert records["file:1"]["relocated_from"] == str(finished)
    assert (records["file:1"]["capture"], records["file:1"]["step"]) == ("step1", 1)
    assert records["pending:2"]["source"] == str(writing)
    assert records["pending:2"]["relocate_to"] == f"step2/{process}/nsys/{writing.name}"
    assert records["pending:2"]["reason"] == "being written by nsys"
    assert records["pending:3"]["source"] == str(ray_dir / f"worker_process_{PID}.3.nsys-rep")
    assert records["pending:3"]["capture"] == "step3"
    assert records["pending:3"]["reason"].startswith("not written yet")

    # later, once nsys is done (the worker exited): the pending ones move, the others stay
    (ray_dir / f"worker_process_{PID}.2.qdstrm").unlink()
    os.utime(writing, (LONG_AGO, LONG_AGO))
    third = report(ray_dir, f"worker_process_{PID}.3.nsys-rep", text="third")
    outcomes = relocate_pending(tmp_path / "out")
    assert sorted(o.status for o in outcomes) == ["moved", "moved"]
    assert (run_dir / "step3" / process / "nsys" / third.name).read_text() == "third"
    assert (run_dir / "step2" / process / "nsys" / writing.name).exists()
    assert not writing.exists() and not third.exists() and all(p.exists() for p in others)
    resolved = [r for r in nsys_records(run_dir) if r["kind"] == "file"]
    assert sorted(r["capture"] for r in resolved) == ["step1", "step2", "step3"]
    assert all(r["pid"] == PID and r["rank"] == 0 and not r["outside_output_dir"] for r in resolved)

    # again: nothing to do, nothing changes
    before = sorted(p.name for p in run_dir.rglob("*.nsys-rep"))
    assert [o.status for o in relocate_pending(run_dir)] == ["done", "done"]
    assert sorted(p.name for p in run_dir.rglob("*.nsys-rep")) == before


def test_an_existing_destination_is_never_overwritten(tmp_path, monkeypatch):
    ray_dir = tmp_path / "nsight"
    ray_dir.mkdir()
    prof = run_three_steps(tmp_path, ray_dir, steps=(1,), monkeypatch=monkeypatch)
    prof.finalize()  # the report is not there yet: pending
    destination = prof.run.run_dir / "step1" / f"rank0-{hostname()}-{PID}" / "nsys" / f"worker_process_{PID}.1.nsys-rep"
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text("already here")
    source = report(ray_dir, f"worker_process_{PID}.1.nsys-rep", text="new")

    assert [o.status for o in relocate_pending(prof.run.run_dir)] == ["exists"]
    assert destination.read_text() == "already here" and source.read_text() == "new"
    assert [o.status for o in relocate_pending(prof.run.run_dir, host="another-node")] == ["other-host"]


def test_a_single_unnumbered_report_belongs_to_the_only_window(tmp_path, monkeypatch):
    ray_dir = tmp_path / "nsight"
    ray_dir.mkdir()
    prof = run_three_steps(tmp_path, ray_dir, steps=(2,), monkeypatch=monkeypatch)
    single = report(ray_dir, f"worker_process_{PID}.nsys-rep")
    prof.finalize()
    assert (prof.run.run_dir / "step2" / f"rank0-{hostname()}-{PID}" / "nsys" / single.name).exists()
    assert [r["kind"] for r in nsys_records(prof.run.run_dir)] == ["file"]


def test_without_nsys_nothing_is_expected(tmp_path, monkeypatch):
    ray_dir = tmp_path / "nsight"
    ray_dir.mkdir()
    prof = run_three_steps(tmp_path, ray_dir, monkeypatch=monkeypatch)
    monkeypatch.delenv("RLPROF_NSYS_WORKER")
    prof.finalize()
    assert nsys_records(prof.run.run_dir) == []


def test_the_command_line_reports_what_is_still_waiting(tmp_path, monkeypatch):
    ray_dir = tmp_path / "nsight"
    ray_dir.mkdir()
    prof = run_three_steps(tmp_path, ray_dir, steps=(1,), monkeypatch=monkeypatch)
    prof.finalize()
    command = [sys.executable, "-m", "rlprof_nsys", "relocate", str(tmp_path / "out")]
    waiting = subprocess.run(command, capture_output=True, text=True)
    assert waiting.returncode == 3 and waiting.stdout.startswith("waiting")
    report(ray_dir, f"worker_process_{PID}.1.nsys-rep")
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("moved"), done.stderr


def test_moving_across_filesystems_copies_then_claims_the_name(tmp_path, monkeypatch):
    def no_hard_links(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_hard_links)
    source = report(tmp_path, "a.nsys-rep", text="payload")
    target = tmp_path / "dest" / "a.nsys-rep"
    move_without_overwrite(source, target)
    assert target.read_text() == "payload" and not source.exists()

    again = report(tmp_path, "a.nsys-rep", text="second")
    with pytest.raises(FileExistsError):
        move_without_overwrite(again, target)
    assert target.read_text() == "payload" and again.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a.nsys-rep"]  # no partial copy left behind


def test_a_process_under_nsys_is_recognised(monkeypatch):
    for variable in ("RLPROF_NSYS_WORKER", "LD_PRELOAD", "NVTX_INJECTION64_PATH"):
        monkeypatch.delenv(variable, raising=False)
    assert not running_under_nsys()
    monkeypatch.setenv("LD_PRELOAD", "/opt/nvidia/nsight-systems/2025.1/target-linux-x64/libToolsInjectionProxy64.so")
    assert running_under_nsys()
    monkeypatch.delenv("LD_PRELOAD")
    monkeypatch.setenv("RLPROF_NSYS_WORKER", "1")
    assert running_under_nsys()


def test_two_profilers_of_one_process_each_move_their_own_reports(tmp_path, monkeypatch):
    """Issue 40: nsys numbers a process's reports in the order its windows open, whichever Profiler opened them.
    Two Profilers of one process (a worker set up twice; colocated roles) open windows in turn: each one's
    reports land in its own captures, none claimed twice, none moved into the other's folder."""
    ray_dir = tmp_path / "ray" / "logs" / "nsight"
    ray_dir.mkdir(parents=True)
    monkeypatch.setenv("RLPROF_STRICT", "1")
    monkeypatch.setenv("RLPROF_NSYS_WORKER", "1")
    profilers = []
    for name in ("first", "second"):
        config = verl_config(tmp_path / name, steps=[1, 2], relocate=True, nsys={"ray_nsight_dir": str(ray_dir)})
        prof = rlprof.Profiler(config, roles=("actor",), run_id=name)
        prof.backends.plugins["nsys"].windows = CaptureWindows(Driver())
        profilers.append(prof)
    for step in (1, 2):  # at the same time: first, second, first, second
        for prof in profilers:
            prof.start_step(step)
            with prof.role("actor", "update"):
                pass
            prof.step_boundary()
    windows = {name: [(w.index, w.step) for w in prof.backends.plugins["nsys"].windows.windows]
               for name, prof in zip(("first", "second"), profilers)}
    assert windows == {"first": [(1, 1), (3, 2)], "second": [(2, 1), (4, 2)]}
    for k in (1, 2, 3, 4):
        report(ray_dir, f"worker_process_{PID}.{k}.nsys-rep", text=f"window {k}")
    for prof in reversed(profilers):  # closes in the other order
        prof.finalize()
    for name, prof in zip(("first", "second"), profilers):
        moved = [r for r in nsys_records(prof.run.run_dir) if r["kind"] == "file"]
        assert sorted((r["step"], (prof.run.run_dir / r["path"]).read_text()) for r in moved) == \
            [(step, f"window {k}") for k, step in windows[name]], (name, moved)
    assert list(ray_dir.glob("*.nsys-rep")) == []
