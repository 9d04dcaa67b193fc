"""``rlprof breakdown`` on torch_npu's parsed output (``ASCEND_PROFILER_OUTPUT/trace_view.json``).

No NPU here: the traces are stand-ins written by trace_view_standin.py in the format torch_npu 2.x
writes, laid out as torch_npu lays out a capture. The figures are the worked example of
docs/analysis.md ("Inside a region").
"""

from __future__ import annotations

import json

import pytest

from rlprof.analysis import breakdown_files, trace_readers, trace_walk
from rlprof.cli.breakdown import main as breakdown_command
from trace_view_standin import HARDWARE, PYTHON, meta, op, trace_view


def by_region(rows, rank=None):
    return {row.region: row for row in rows if rank is None or row.rank == rank}


def test_the_worked_example_splits_from_the_trace_view(tmp_path):
    path = trace_view(tmp_path, 0)
    rows, errors = breakdown_files.breakdown([path])
    assert errors == []
    row = by_region(rows)["actor_update"]
    assert (row.rank, row.step, row.device) == (0, 3, "npu")
    # the all-reduce task and the HCCL op are one union; the event wait is no work; SDMA/PCIe DMA are copies
    assert (row.window_ms, row.compute_ms, row.communication_ms, row.overlap_ms, row.exposed_communication_ms,
            row.memory_ms, row.exposed_memory_ms, row.idle_ms) == pytest.approx((10, 6, 3, 1, 2, 2, 1, 1))
    assert set(by_region(rows)) == {"ProfilerStep#3", "actor_update", "(trace)"}  # torch ops are no regions


def test_two_ranks_are_matched_and_the_late_one_is_named(tmp_path):
    paths = [trace_view(tmp_path, 0, comm_enter=6), trace_view(tmp_path, 1, comm_enter=8)]
    collected = trace_walk.collect([str(tmp_path)], trace_readers.readers()[0])
    rows, errors = breakdown_files.breakdown(collected.files, workers=1)
    assert errors == [] and {row.path for row in rows} == {str(p) for p in paths}
    # torch_npu's rank files are its own, not Kineto traces: passed over, saying whose they are
    assert collected.skipped == [(str(p.parents[1] / f"profiler_info_{rank}.json"),
                                  "npu writes it beside its traces (profiler_info*.json): not a trace")
                                 for rank, p in enumerate(paths)]
    early = by_region(rows, rank=0)["actor_update"]
    assert (early.communication_wait_ms, early.communication_transfer_ms) == pytest.approx((2, 1))
    assert early.waited_for_rank == 1
    assert by_region(rows, rank=1)["actor_update"].communication_wait_ms == 0


@pytest.mark.parametrize("content, reason", [
    ('[{"ph": "X", "name": "a", "pid": 1, "ts": "1", "dur": 1', "IncompleteJSONError"),  # truncated
    ('{"schema": 1, "data": []}', "not a trace view (no list of trace events)"),
    (json.dumps([meta(1, "Python"), op(1, "ProfilerStep#1", 0, 1, "cpu_op")]), "no 'Ascend Hardware' row"),
    (json.dumps([meta(HARDWARE, "Ascend Hardware"), op(PYTHON, "ProfilerStep#1", 0, 1, "cpu_op")]),
     "no device tasks on its 'Ascend Hardware' row"),
])
def test_a_bad_trace_view_costs_one_line_naming_it_and_the_others_are_reported(tmp_path, capsys, content, reason):
    good = trace_view(tmp_path / "good", 0)
    bad = tmp_path / "bad" / "trace_view.json"
    bad.parent.mkdir()
    bad.write_text(content)
    code = breakdown_command([str(good), str(bad), "--json", "--workers", "1"])
    out, err = capsys.readouterr()
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlprof breakdown: {bad}: ") and reason in lines[0]
    assert {row["path"] for row in json.loads(out)["rows"]} == {str(good)}


def test_a_trace_view_is_never_read_as_a_kineto_trace(tmp_path):
    assert trace_readers.reader_for(trace_view(tmp_path, 0), trace_readers.readers()[0]) == "rlprof_npu.trace_reader:read_trace"


def test_flops_torch_npu_computed_and_its_hook_marked_are_counted_per_region(tmp_path):
    """Issue 49, on a stand-in trace view (no NPU here): a torch op's ``args.flops`` (torch_npu's ``with_flops``),
    for the matrix products only, and the ranges torch_npu's FLOPs hook marks on the mstx row around a fused
    kernel's Python call (``<flops>-<op>``: not a region), the hooked plain products left to their ops' args."""
    from trace_view_standin import MSTX, task

    def with_args(event, **args):
        return {**event, "args": args}

    events = [meta(PYTHON, "Python"), meta(HARDWARE, "Ascend Hardware"), meta(MSTX, "MsTx"),
              op(PYTHON, "ProfilerStep#3", 0, 20, "cpu_op"), op(MSTX, "actor_update", 0, 10),
              with_args(op(PYTHON, "aten::mm", 0.5, 0.6, "cpu_op"), flops=1000),
              with_args(op(PYTHON, "aten::add", 0.7, 0.8, "cpu_op"), flops=64),  # elementwise: not counted
              op(MSTX, "5000-npu_fusion_attention", 1.0, 2.0), op(MSTX, "1000-mm", 0.4, 0.7),
              *task("MatMul_1", 1, 5, 0.5), op(MSTX, "ref_compute_log_prob", 12, 14), *task("Other", 12.5, 13, 12.2)]
    rows, errors = breakdown_files.breakdown([trace_view(tmp_path, 0, events=events)])
    assert errors == []
    rows = by_region(rows)
    assert rows["actor_update"].flops == 6000
    assert rows["ref_compute_log_prob"].flops == 0  # counted, nothing in it
    assert "5000-npu_fusion_attention" not in rows and "1000-mm" not in rows  # the hook's ranges are no regions
    assert rows["actor_update"].mfu_note == "no peak known for its device"  # no run recorded one here
