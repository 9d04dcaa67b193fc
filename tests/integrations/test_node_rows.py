"""Each node analyses its own traces and only the rows travel (rlprof.integrations.node_rows), without Ray:
what a node's task returns, which manifest records make a trace worth analysing, and that the rows
written on the controller are the ones ``rlprof report`` reads for a trace it does not have.
tests/cli/test_demo_nodes.py runs the same on three simulated Ray nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlprof.analysis.rows_cache import shipped
from rlprof.integrations.node_rows import NodeRows, analyse_here
from rlprof.integrations.nodes import ManifestBatch
from rlprof.layout import rows_path, shipped_rows_path

pytest.importorskip("rlprof_torch")

NODE = "f" * 56


def kineto(path: Path) -> Path:
    """A CPU-only Kineto trace: one region holding one op."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 0, "dur": 20, "pid": 1, "tid": 1},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 10, "pid": 1, "tid": 1}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_node_returns_the_rows_of_each_trace_and_one_line_for_a_bad_one(tmp_path):
    good, bad = kineto(tmp_path / "rank0.pt.trace.json"), tmp_path / "rank1.pt.trace.json"
    bad.write_text('{"traceEvents": [')
    answers = analyse_here([str(good), str(bad)], timeout_s=120)
    assert answers[str(good)] == rows_path(str(good)).read_bytes()  # kept in the cache folder (no run here), and sent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.pt.trace.json", "rank1.pt.trace.json"]  # not beside
    document = json.loads(answers[str(good)])
    assert [row["region"] for row in document["rows"] if row["region"] == "actor_update"] == ["actor_update"]
    assert len(answers[str(good)]) < 4096  # kilobytes, whatever the trace's size
    assert isinstance(answers[str(bad)], str) and "IncompleteJSONError" in answers[str(bad)]


def test_only_whole_traces_a_reader_reads_are_analysed_and_their_rows_land_where_the_report_looks(tmp_path):
    node_run = tmp_path / "node" / "run"
    trace = kineto(node_run / "step1" / "rank0-h-1" / "torch" / "rank0.pt.trace.json")
    records = [{"type": "artifact", "backend": "torch", "path": "step1/rank0-h-1/torch/rank0.pt.trace.json", "state": "written"},
               {"type": "artifact", "backend": "torch", "path": "step2/rank0-h-1/torch/rank0.pt.trace.json", "state": "writing"},
               {"type": "artifact", "backend": "torch", "path": "step1/rank0-h-1/torch/profile.svg"},
               {"type": "artifact", "backend": "nsys", "path": "worker.nsys-rep", "kind": "pending"},
               {"type": "region", "region": "actor_update"}]
    batch = ManifestBatch(name="rank0-h-1.jsonl", path=str(node_run / "manifest" / "rank0-h-1.jsonl"), node=NODE, host="h",
                          run="run", rank=0, pid=1, run_dir=str(node_run), offset=0,
                          lines=b"".join(json.dumps(r).encode() + b"\n" for r in records))
    controller_run = tmp_path / "controller" / "run"
    rows = NodeRows(controller_run, ["torch"])
    rows._patterns = {"torch": ("*.json", "*.json.gz")}
    rows.see(batch)
    assert rows._new == {NODE: [str(trace)]}

    (node_run / "manifest").mkdir()  # the node's own run directory: its processes' manifests are there
    data = analyse_here([str(trace)], timeout_s=120)[str(trace)]
    assert data == rows_path(str(trace)).read_bytes() and rows_path(str(trace)).parent == node_run / "breakdown"
    assert [p.name for p in trace.parent.iterdir()] == [trace.name]  # the node keeps its rows in its run's folder
    rows._write(NODE, str(trace), data)
    assert rows.shipped == {str(trace): len(data)}
    landed = shipped_rows_path(controller_run, NODE, str(trace))
    assert landed.parent == controller_run / "breakdown" and landed.read_bytes() == data
    assert shipped(landed, str(trace), trace.stat().st_size) is not None
    assert shipped(landed, str(trace), trace.stat().st_size + 1) is None  # another file than the one read
