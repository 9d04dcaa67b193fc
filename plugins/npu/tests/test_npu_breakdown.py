"""``rlprof breakdown`` on torch_npu's parsed output (``ASCEND_PROFILER_OUTPUT/trace_view.json``).

No NPU here: the traces are stand-ins written by :func:`trace_view` in the format torch_npu 2.x
writes (a JSON list; ``ts`` in µs as strings; one pid per row named by ``process_name`` metadata:
``Python`` torch ops, ``Ascend Hardware`` tasks with their ``Task Type``, ``HCCL`` collective ops,
``MsTx`` ranges; ``torch_to_npu`` flows of category ``async_npu`` from a torch op to its task's
``(pid, tid, ts)``), laid out as torch_npu lays out a capture (``profiler_info_<rank>.json`` beside
``ASCEND_PROFILER_OUTPUT``). The figures are the worked example of docs/analysis.md ("Inside a region").
"""

from __future__ import annotations

import json

import pytest

from rlprof.analysis import breakdown_files

BASE_US = 1_700_000_000_000_000.0
"""µs since the epoch, as torch_npu writes ``ts``."""
PYTHON, HARDWARE, HCCL, MSTX = 1000, 2000, 3000, 4000


def ts(ms: float) -> str:
    return f"{BASE_US + ms * 1000:.3f}"


def meta(pid: int, name: str) -> dict:
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}


def task(name: str, start: float, end: float, launch: float | None, task_type: str = "AI_CORE", stream: int = 7) -> list[dict]:
    """A device task on the ``Ascend Hardware`` row, and the flow from the torch op that launched it at ``launch``."""
    event = {"ph": "X", "name": name, "pid": HARDWARE, "tid": stream, "ts": ts(start), "dur": (end - start) * 1000,
             "cat": None, "args": {"Task Type": task_type, "Stream Id": stream, "Task Id": 1}}
    if launch is None:
        return [event]
    flow = str(int(BASE_US * 1000 + start * 1e6))
    return [event, {"ph": "s", "bp": "e", "name": "torch_to_npu", "id": flow, "pid": PYTHON, "tid": 1, "ts": ts(launch),
                    "cat": "async_npu"},
            {"ph": "f", "bp": "e", "name": "torch_to_npu", "id": flow, "pid": HARDWARE, "tid": stream, "ts": ts(start),
             "cat": "async_npu"}]


def op(pid: int, name: str, start: float, end: float, cat: str | None = None) -> dict:
    return {"ph": "X", "name": name, "pid": pid, "tid": 1, "ts": ts(start), "dur": (end - start) * 1000, "cat": cat,
            "args": {}}


def trace_view(root, rank: int, *, comm_enter: float = 6, events: list[dict] | None = None):
    """A capture of ``rank`` under ``root`` (``<root>/rank<R>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json``):
    the worked example, its all-reduce entered at ``comm_enter``."""
    capture = root / f"node_{rank}_ascend_pt"
    (capture / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    (capture / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))
    if events is None:
        events = [meta(PYTHON, "Python"), meta(HARDWARE, "Ascend Hardware"), meta(HCCL, "HCCL"), meta(MSTX, "MsTx"),
                  op(PYTHON, "ProfilerStep#3", 0, 20, "cpu_op"), op(MSTX, "actor_update", 0, 10),
                  op(PYTHON, "aten::mm", 0.5, 0.6, "cpu_op"),
                  *task("MatMul_1", 1, 5, 0.5), *task("Add_2", 4, 7, 0.6, "AI_VECTOR_CORE"),
                  *task("MemcpyAsync", 2, 3, 0.8, "SDMA_SQE"), *task("MemSet", 9, 10, 0.9, "PCIE_DMA_SQE"),
                  *task("EventWait", 0, 10, 0.1, "EVENT_WAIT_SQE"),
                  *task("hcom_allReduce__657_0_1", comm_enter, 9, 0.7, "COMMUNICATION"),
                  op(HCCL, "hcom_allReduce__657_0_1", comm_enter, 9),
                  *task("NextRegion", 12, 13, 11)]
    path = capture / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    path.write_text(json.dumps(events))
    return path


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
    rows, errors = breakdown_files.breakdown(breakdown_files.trace_files([str(tmp_path)]), workers=1)
    assert errors == [] and {row.path for row in rows} == {str(p) for p in paths}
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
    code = breakdown_files.main([str(good), str(bad), "--json", "--workers", "1"])
    out, err = capsys.readouterr()
    assert code == 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlprof breakdown: {bad}: ") and reason in lines[0]
    assert {row["path"] for row in json.loads(out)["rows"]} == {str(good)}


def test_a_trace_view_is_never_read_as_a_kineto_trace(tmp_path):
    assert breakdown_files.reader_for(trace_view(tmp_path, 0), breakdown_files.readers()[0]) == "rlprof_npu.trace_reader:read_trace"
