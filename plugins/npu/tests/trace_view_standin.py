"""A stand-in for torch_npu's parsed output (``ASCEND_PROFILER_OUTPUT/trace_view.json``), written by tests:
no NPU here to record one.

The format torch_npu 2.x writes: a JSON list; ``ts`` in µs as strings; one pid per row named by
``process_name`` metadata (``Python`` torch ops, ``Ascend Hardware`` tasks with their ``Task Type``,
``HCCL`` collective ops, ``MsTx`` ranges); ``torch_to_npu`` flows of category ``async_npu`` from a torch op
to its task's ``(pid, tid, ts)``; laid out as torch_npu lays out a capture (``profiler_info_<rank>.json``
beside ``ASCEND_PROFILER_OUTPUT``). :func:`trace_view` writes the worked example of docs/analysis.md
("Inside a region"). Loaded by test_npu_breakdown.py, and by path from tests/analysis (a folder of
every backend's traces).
"""

from __future__ import annotations

import json

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
