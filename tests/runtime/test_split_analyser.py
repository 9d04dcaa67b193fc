"""Issue 42: a process's split analyser announces each file of a captured step with its timings, analyses it in
a child process once written, one at a time, and sends the answer; a file it cannot analyse costs one log
line and an empty answer, never an exception."""

from __future__ import annotations

import logging
import threading

from rlprof.runtime.split_analyser import SplitAnalyser
from rlprof.runtime.step_timings import RegionTimes


class Kept:
    def __init__(self):
        self.batches = []

    def send(self, batch):
        self.batches.append(batch)


def test_announced_at_writing_answered_once_written_and_a_bad_file_is_one_log_line(tmp_path, caplog):
    times = RegionTimes("run", "rank0", 0, Kept())
    analyser = SplitAnalyser(("actor",))
    analyser.add(times)
    bad = tmp_path / "rank0.pt.trace.json.gz"
    analyser.offer(bad, {"step": 3, "steps": [3], "state": "writing"})
    assert times.splits == [(3, None)]  # the driver now waits for its answer
    bad.write_bytes(b"not a gzip file")
    with caplog.at_level(logging.INFO, logger="rlprof"):
        analyser.offer(bad, {"step": 3, "steps": [3], "state": "written"})
        assert analyser.wait(60)
    assert times.splits == [(3, None), (3, {})]
    (line,) = [r for r in caplog.records if r.name == "rlprof"]
    assert line.levelno == logging.WARNING and str(bad) in line.getMessage()
    assert times.take().splits == [(3, None), (3, {})] and times.splits == []


def test_a_file_that_failed_to_be_written_is_answered_at_once_and_a_file_of_no_step_is_not_announced(tmp_path):
    times = RegionTimes("run", "rank0", 0, Kept())
    analyser = SplitAnalyser(("actor",))
    analyser.add(times)
    analyser.offer(tmp_path / "a", {"step": 1, "steps": [1], "state": "writing"})
    analyser.offer(tmp_path / "a", {"step": 1, "steps": [1], "state": "failed"})
    analyser.offer(tmp_path / "b", {"step": None, "steps": []})
    assert times.splits == [(1, None), (1, {})] and analyser.wait(0)


def test_answers_go_to_a_profiler_still_sending(tmp_path):
    first, second = RegionTimes("run", "rank0", 0, Kept()), RegionTimes("run", "rank0", 0, Kept())
    analyser = SplitAnalyser(("actor",))
    analyser.add(first)
    analyser.add(second)
    first.flush(final=True)  # its last batch went
    analyser.offer(tmp_path / "a", {"step": 2, "steps": [2], "state": "failed"})
    assert first.splits == [] and second.splits == [(2, None), (2, {})]


def test_a_file_the_processs_writer_places_is_answered_once_placed_and_once_only(tmp_path, caplog):
    """A trace handed to the process's writer is analysed when the writer has placed it: its owner lists it
    ``written`` only at its next hook call, which a run's last capture gets at finalize (issue 46). Its later
    ``written`` listing queues nothing more."""
    from rlprof.layout import reserve
    from rlprof.runtime.trace_writer import Export, Folder, process_writer

    times = RegionTimes("run", "rank0", 0, Kept())
    analyser = SplitAnalyser(("actor",))
    analyser.add(times)
    (tmp_path / "plain.json").write_text("not a trace")
    target = reserve(tmp_path / "rank0.pt.trace.json.gz", tmp_path)
    release, owner = threading.Event(), object()
    export = Export(Folder(tmp_path), "plain.json", target, {"step": 4}, owner=owner, dump=lambda _: release.wait(60))
    writer = process_writer()
    writer.submit(export)
    with caplog.at_level(logging.INFO, logger="rlprof"):
        analyser.offer(target.path, {"step": 4, "steps": [4], "state": "writing"})
        assert times.splits == [(4, None)] and not analyser.wait(0)  # waits for the writer, not for a listing
        release.set()
        assert analyser.wait(60)
        assert times.splits == [(4, None), (4, {})]  # not a trace: an empty answer and one log line
        assert writer.finished(owner) == [export]
        analyser.offer(target.path, {"step": 4, "steps": [4], "state": "written"})  # the owner's next hook call
        assert analyser.wait(0) and times.splits == [(4, None), (4, {})]
    assert len([r for r in caplog.records if "is left out of the step metrics" in r.getMessage()]) == 1


def test_at_the_end_files_not_answered_are_handed_on_never_waited_for(tmp_path, monkeypatch):
    """Issue 49: finalize hands the files still queued on (a ``late`` answer naming each, for the book to have them
    analysed outside the process); one written after that is handed on at once; an analysis that finishes after
    the hand-off sends nothing (its file was handed on)."""
    import threading

    from rlprof.runtime import split_analyser

    release = threading.Event()
    started = threading.Event()

    def slow(path, roles, steps):
        started.set()
        release.wait(30)
        return {steps[0]: {("actor", "actor_update"): {"compute_ms": 1.0}}}

    monkeypatch.setattr(split_analyser, "analyse", slow)
    times = RegionTimes("run", "rank0", 0, Kept())
    analyser = SplitAnalyser(("actor",))
    analyser.add(times)
    for step, name in ((1, "a"), (2, "b")):
        analyser.offer(tmp_path / name, {"step": step, "steps": [step], "state": "written"})
    assert started.wait(30)  # "a" is being analysed, "b" waits its turn
    analyser.hand_off()
    analyser.offer(tmp_path / "c", {"step": 3, "steps": [3], "state": "written"})
    release.set()
    assert analyser.wait(30)
    late = [(step, answer) for step, answer in times.splits if split_analyser.is_late(answer)]
    assert sorted((step, answer[1]) for step, answer in late) == [(1, str(tmp_path / "a")), (2, str(tmp_path / "b")),
                                                                   (3, str(tmp_path / "c"))]
    assert all(answer[2] == ["actor"] for _, answer in late)
    assert not [a for _, a in times.splits if isinstance(a, dict)]  # "a"'s answer came after the hand-off: not sent


ENDS_KILLING_ITS_CHILDREN = """
import json, os, signal, sys
from pathlib import Path
from rlprof.runtime.split_analyser import start_late
run = Path(sys.argv[1])
job = {"run": "run", "metrics": str(run / "step_metrics.jsonl"), "steps": [{"step": 2, "processes": [
    {"figures": [["actor", "actor_update", json.loads(sys.argv[2])]], "late": []}]}]}
assert start_late(job, run / "late_splits", run) is not None
for entry in os.listdir("/proc"):  # as Ray ends a worker (RAY_kill_child_processes_on_worker_exit): its children
    try:
        ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (ValueError, OSError, IndexError):
        continue
    if ppid == os.getpid():
        os.kill(int(entry), signal.SIGKILL)
"""


def test_a_late_split_outlives_a_starter_whose_children_are_killed_as_it_ends(tmp_path):
    """Issue 49's late split, started by verl's trainer in a Ray actor: Ray kills a worker's children when the
    worker ends (by default), and the job's end ends the trainer's actor at once. The late program is nobody's
    child (``rlprof.priority.detached``), so it still writes the step's split line and removes its job file.
    Before the fix it was the actor's child: killed, its job file left in ``late_splits/`` and no split line
    (test_verl_trainer.py's e2e run: ``late_split.wait`` False)."""
    import json
    import subprocess
    import sys

    from rlprof.analysis.late_split import pending, wait
    from rlprof.step_metrics import read_step_metrics

    update = {"compute_ms": 60.0, "exposed_comm_ms": 20.0, "exposed_memory_ms": 0.0, "idle_ms": 20.0,
              "window_ms": 100.0, "peak_allocated_bytes": None}
    subprocess.run([sys.executable, "-c", ENDS_KILLING_ITS_CHILDREN, str(tmp_path), json.dumps(update)], check=True,
                   timeout=120)
    assert wait(tmp_path, timeout_s=300), pending(tmp_path)  # the late program runs at the lowest priority there is
    (split,) = [r for r in read_step_metrics(tmp_path / "step_metrics.jsonl") if r.kind == "split"]
    assert split.step == 2 and split.metrics["rlprof/actor/update/compute_frac"] == 0.6, split.metrics
