"""Files written in the background: listed as ``writing`` when their capture closed, then ``written``
(or ``failed``). The report counts each file once, and names the ones the process never finished."""

from __future__ import annotations

import gzip

from rlprof.analysis.runs import build_reports
from rlprof.analysis.verdict import verdict
from rlprof.manifest import ManifestWriter, read_records, settled_artifacts

TRACE = "step1/rank0-h-7/torch/rank0.pt.trace.json.gz"


def run_with(run_dir, *states, trace_on_disk=False):
    """One process of run ``r`` that profiled step 1 (role actor) and listed its trace with ``states``."""
    writer = ManifestWriter(run_dir / "manifest" / "rank0-h-7.jsonl", {"run": "r", "rank": 0, "host": "h", "pid": 7},
                            root=run_dir)
    writer.write("process", world_size=1, roles=["actor"], selected_roles=["actor"], steps=[1], mode="e2e",
                 tools=["torch"], save_path=str(run_dir.parent), replica_rank=None, expected_captures=1, environment={})
    for state, extra in states:
        writer.write("artifact", backend="torch", step=1, steps=[1], roles=["actor"], region=None, capture="step1",
                     mode="e2e", iterations=None, world_size=1, path=TRACE, size=extra.pop("size", 0), kind="file",
                     outside_output_dir=False, state=state, **extra)
    writer.write("finalized", reason="end", roles=["actor"], artifacts=len(states), errors=0)
    writer.close()
    if trace_on_disk:
        (run_dir / TRACE).parent.mkdir(parents=True)
        (run_dir / TRACE).write_bytes(gzip.compress(b'{"traceEvents": []}'))
    return run_dir


def test_a_file_listed_writing_then_written_is_one_file_with_its_final_size(tmp_path):
    run_dir = run_with(tmp_path / "r", ("writing", {}), ("written", {"size": 1234, "sha256": "ab" * 32}),
                       trace_on_disk=True)
    [record] = [r for r in read_records([run_dir]) if r["type"] == "artifact"]  # the pair read as one
    assert (record["state"], record["size"], record["capture"]) == ("written", 1234, "step1")
    [report] = build_reports([run_dir])
    assert [(f.path.endswith(TRACE), f.size) for f in report.files] == [(True, 1234)]
    assert report.unwritten == [] and report.missing == []
    assert verdict([run_dir]).ok


def test_a_file_still_being_written_when_the_process_died_is_named_as_cut(tmp_path):
    run_dir = run_with(tmp_path / "r", ("writing", {}))
    [report] = build_reports([run_dir])
    assert report.files == [] and report.missing == []  # explained by the cut, not missing besides
    [cut] = report.unwritten
    assert (cut["capture"], cut["path"], cut["state"]) == ("step1", TRACE, "writing")
    said = verdict([run_dir])
    assert not said.ok
    assert [line for line in said.lines if line.startswith("cut:")] == [
        f"cut: rank 0 (h pid 7): torch capture step1: {TRACE} was still being written when the process stopped "
        "(killed, or finalize stopped waiting); no file is under its name"]


def test_a_writing_record_whose_file_is_in_place_counts_the_file_on_disk(tmp_path):
    """Placed after the last record (finalize stopped waiting, the writer finished later): a file appears
    under its final name only whole, so it is the file."""
    run_dir = run_with(tmp_path / "r", ("writing", {}), trace_on_disk=True)
    [report] = build_reports([run_dir])
    assert report.unwritten == [] and [f.size for f in report.files] == [(run_dir / TRACE).stat().st_size]


def test_a_failed_write_is_named_with_its_error(tmp_path):
    run_dir = run_with(tmp_path / "r", ("writing", {}), ("failed", {"error": "OSError: [Errno 28] No space left"}))
    [report] = build_reports([run_dir])
    [cut] = report.unwritten
    assert cut["state"] == "failed" and "No space left" in cut["error"]
    assert any(line.startswith("cut:") and "could not be written: OSError" in line for line in verdict([run_dir]).lines)


def test_the_settling_record_may_come_first():
    """A backend released after a failing hook is finalized before that call's records are written."""
    writing = {"path": "a", "state": "writing", "capture": "step1", "size": 0}
    written = {"path": "a", "state": "written", "capture": None, "size": 10, "sha256": "x"}
    other = {"path": "b"}
    for order in ([writing, other, written], [written, other, writing]):
        assert settled_artifacts(order) == [{"path": "a", "state": "written", "capture": "step1", "size": 10, "sha256": "x"},
                                            {"path": "b"}]
    assert settled_artifacts([other, other]) == [other, other]  # listed twice without a state: still twice
