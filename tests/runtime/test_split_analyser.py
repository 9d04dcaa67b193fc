"""Issue 42: a process's split analyser announces each file of a captured step with its timings, analyses it in
a child process once written, one at a time, and sends the answer; a file it cannot analyse costs one log
line and an empty answer, never an exception."""

from __future__ import annotations

import logging

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
