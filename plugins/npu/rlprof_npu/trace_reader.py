"""torch_npu's parsed profiler output read for the breakdown: ``ASCEND_PROFILER_OUTPUT/trace_view.json``.

:func:`read_trace` turns one ``trace_view.json`` into the analysis's neutral
:class:`~rlprof.analysis.breakdown.TraceEvents` (device ``npu``). It streams with ijson, in two
passes: the first keeps only the ``process_name`` metadata (which pid is which row), the second
only the events the breakdown needs, in 8-byte columns; memory follows the number of device tasks,
not the size of the file.

The format, as torch_npu 2.x writes it (``TraceViewParser`` over CANN's msprof timeline) and
msprof-analyze reads it: a JSON list of Chrome trace events, ``ts`` in µs since the epoch (often a
string) so every process of a host shares the clock; one pid per row, named by a ``ph: M``
``process_name`` event:

* ``Ascend Hardware``: the device tasks (``ph: X``), their ``args["Task Type"]`` saying what ran
  (``AI_CORE``, ``AI_VECTOR_CORE``, ``MIX_AIC`` ... compute; ``SDMA_SQE`` / ``PCIE_DMA_SQE``
  copies; ``*_WAIT_SQE`` / ``*_RECORD_SQE`` synchronisation, no work); collective tasks are named
  ``hcom_*`` / ``hccl*``;
* ``HCCL`` (``Communication`` in some versions): each collective op (``hcom_allReduce__657_0_1``)
  on its group's thread, and its tasks on the plane threads; the ops count as communication, and
  are the calls matched across ranks (by name, as msprof-analyze's cluster analysis matches them);
* ``torch_to_npu`` flows (``cat: async_npu``): ``ph: s`` at the launching torch op, ``ph: f`` at the
  task's own ``(pid, tid, ts)``: a task's launch is its flow's start. An HCCL op has no flow; its
  launch is its start;
* regions: ``ProfilerStep#N`` (a ``cpu_op``), and ranges on the mstx row (``MsTx`` or ``MsprofTx``,
  where rlprof's ``mstx.range_start`` regions land) or of category ``user_annotation``.

FLOPs, where the capture asked for them (``tool_config.npu.flops``: torch_npu's ``with_flops``): a torch op's
``args.flops`` (torch's formulas, computed by torch_npu as it records; only the matrix products rlprof counts:
:data:`rlprof.analysis.op_flops.COUNTED`), and the ranges torch_npu's FLOPs hook marks on the mstx row (domain
``mfu_flops``, named ``<flops>-<op>``, around each Python call of a fused NPU kernel it has a formula for:
``npu_fusion_attention``, grouped matmuls...), which are not regions; those of the products torch already counts
(``mm``, ``bmm``, ``matmul``, ``linear``, ``addmm``) are left out. The peak: what the run's host measured
(:func:`rlprof.peak.recorded_peak`).

``kernel_details.csv`` lists the same device tasks as the ``Ascend Hardware`` row and
``communication.json`` HCCL's own per-op summary; neither adds an interval the split needs.
"""

from __future__ import annotations

import math
from array import array
import re
from pathlib import Path
from typing import Any, Iterator

import ijson

from rlprof.backend_api import (BoundedTokens, COMMUNICATION, COUNTED, device_kind, is_uncounted, numbered_collectives,
                                recorded_peak, Region, regions_in_steps, TraceEvents)
from rlprof.layout import process_of

DEVICE_ROW = "Ascend Hardware"
COMMUNICATION_ROWS = ("HCCL", "Communication")
REGION_ROWS = ("MsTx", "MsprofTx")
COLLECTIVE_PREFIXES = ("hcom_",)
"""Besides ``hccl`` (which the breakdown knows): HCCL names its collective ops and tasks ``hcom_*``."""
COPY_TASKS = frozenset({"SDMA_SQE", "PCIE_DMA_SQE", "MEMCPY_ASYNC"})
SYNC_TASK = re.compile(r"_(WAIT|RECORD)_SQE$")
"""Synchronisation tasks (event and notify waits and records): a stream waiting, not working."""
FLOW_CATEGORY = "async_npu"
STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
RANK_FILE = re.compile(r"profiler_info_(\d+)\.json$")
"""torch_npu writes ``profiler_info_<rank>.json`` beside ``ASCEND_PROFILER_OUTPUT``."""
HOOKED_FLOPS = re.compile(r"^(\d+)-(\S+)$")
"""A range torch_npu's FLOPs hook marks (domain ``mfu_flops``): ``<flops>-<op>``."""
HOOKED_COUNTED = frozenset({"mm", "bmm", "matmul", "linear", "addmm"})
"""Hooked Python calls whose aten ops carry their FLOPs already (counted from ``args.flops``)."""
META_TOKENS = 1_000_000
"""The first pass gives up on a file whose first this-many tokens hold no trace event list."""


class NotTraceView(ValueError):
    """The file is JSON but not torch_npu's trace view, or has no device task to split."""


def read_trace(path: str) -> TraceEvents:
    """The ``trace_view.json`` at ``path`` in the breakdown's neutral form.

    :raises NotTraceView: no list of trace events, no ``Ascend Hardware`` row, or no device task.
    :raises OSError, ValueError: unreadable, truncated, not JSON (ijson's errors are ValueErrors).
    """
    prefix = _events_prefix(path)
    rows = {pid: name for pid, name in _process_names(path, prefix)}
    device_pids = {pid for pid, name in rows.items() if name == DEVICE_ROW}
    if not device_pids:
        raise NotTraceView("no 'Ascend Hardware' row (not a torch_npu trace view, or no device data was collected)")
    reading = _Reading(path, rows, device_pids)
    with open(path, "rb") as raw:
        handle = BoundedTokens(raw)
        for event in ijson.items(handle, prefix, use_float=True):
            if isinstance(event, dict):
                reading.take(event)
    return reading.finish()


def _events_prefix(path: str) -> str:
    """``item`` for a bare list of events (torch_npu's form), ``traceEvents.item`` for an object holding one."""
    with open(path, "rb") as raw:
        handle = BoundedTokens(raw)
        for tokens, (prefix, kind, _) in enumerate(ijson.parse(handle)):
            if prefix == "" and kind == "start_array":
                return "item"
            if prefix == "traceEvents" and kind == "start_array":
                return "traceEvents.item"
            if (prefix == "" and kind in ("string", "number", "boolean", "null")) or tokens > META_TOKENS:
                break
    raise NotTraceView("not a trace view (no list of trace events)")


def _process_names(path: str, prefix: str) -> Iterator[tuple[Any, str]]:
    with open(path, "rb") as raw:
        handle = BoundedTokens(raw)
        for event in ijson.items(handle, prefix, use_float=True):
            if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == "process_name":
                args = event.get("args") or {}
                if isinstance(args, dict) and isinstance(args.get("name"), str):
                    yield event.get("pid"), args["name"]


def _ms(value: Any) -> float | None:
    """A ``ts``/``dur`` in µs (a number or a numeric string) as ms."""
    try:
        return float(value) / 1000.0
    except (TypeError, ValueError):
        return None


class _Reading:
    """What the second pass keeps."""

    def __init__(self, path: str, rows: dict[Any, str], device_pids: set[Any]):
        rank, group = _place(path)
        self.trace = TraceEvents(path=path, rank=rank, device="npu", group=group)
        self.rows = rows
        self.device_pids = device_pids
        self.task_keys: list[tuple[Any, Any, str]] = []
        """(pid, tid, ts as written) of each task added, for its launch flow; HCCL ops get None."""
        self.flow_ends: dict[tuple[Any, Any, str], Any] = {}
        self.flow_starts: dict[Any, float] = {}
        self.device_calls: list[tuple[int, str]] = []
        self.op_calls: list[tuple[float, float, str]] = []
        self.steps: list[Region] = []
        self.annotations: list[tuple[str, float, float]] = []
        self.counting = False
        """Some op carries ``args.flops``: the capture asked for FLOPs."""
        self.flops: list[tuple[float, float]] = []
        self.uncounted: list[tuple[float, str]] = []

    def take(self, event: dict[str, Any]) -> None:
        phase, name, pid = event.get("ph"), event.get("name"), event.get("pid")
        if phase in ("s", "f") and event.get("cat") == FLOW_CATEGORY:
            self._flow(event)
            return
        if phase != "X" or not isinstance(name, str):
            return
        start, duration = _ms(event.get("ts")), _ms(event.get("dur", 0))
        if start is None or duration is None:
            return
        end, row = start + duration, self.rows.get(pid, "")
        if pid in self.device_pids:
            self._task(event, name, start, end)
        elif row in COMMUNICATION_ROWS:
            if name.startswith(COLLECTIVE_PREFIXES + ("hccl",)):
                self.trace.add(start, end, COMMUNICATION, start)
                self.task_keys.append(None)
                self.op_calls.append((start, end, name))
        elif STEP_NAME.match(name):
            self.steps.append(Region(name, int(STEP_NAME.match(name).group(1)), start, end))
        elif row in REGION_ROWS and HOOKED_FLOPS.match(name):
            flops, hooked = HOOKED_FLOPS.match(name).groups()
            if hooked not in HOOKED_COUNTED:  # torch's own ops count these through their args
                self.flops.append((start, float(flops)))
        elif row in REGION_ROWS or event.get("cat") == "user_annotation":
            self.annotations.append((name, start, end))
        else:
            self._op(event, name, start)

    def _op(self, event: dict[str, Any], name: str, start: float) -> None:
        """A torch op: its FLOPs where torch_npu computed them (``with_flops``), a compute op no formula counts."""
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if "flops" in args:
            self.counting = True
            try:
                flops = float(args["flops"])
            except (TypeError, ValueError):
                return
            if name in COUNTED and flops > 0:
                self.flops.append((start, flops))
        elif is_uncounted(name):
            self.uncounted.append((start, name))

    def _task(self, event: dict[str, Any], name: str, start: float, end: float) -> None:
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        task_type = str(args.get("Task Type", ""))
        if SYNC_TASK.search(task_type):
            return
        kind = device_kind(name, task_type in COPY_TASKS, COLLECTIVE_PREFIXES)
        if kind == COMMUNICATION:
            self.device_calls.append((len(self.trace.kinds), name))
        self.trace.add(start, end, kind, math.inf)
        self.task_keys.append((event.get("pid"), event.get("tid"), str(event.get("ts"))))

    def _flow(self, event: dict[str, Any]) -> None:
        if event.get("ph") == "s":
            start = _ms(event.get("ts"))
            if start is not None:
                self.flow_starts[event.get("id")] = start
        else:
            self.flow_ends[(event.get("pid"), event.get("tid"), str(event.get("ts")))] = event.get("id")

    def finish(self) -> TraceEvents:
        trace = self.trace
        if not len(trace.kinds):
            raise NotTraceView("no device tasks on its 'Ascend Hardware' row")
        for index, key in enumerate(self.task_keys):
            if key is None:  # an HCCL op: launched when it starts
                continue
            launch = self.flow_starts.get(self.flow_ends.get(key), math.inf)
            trace.launches[index] = launch
        if self.op_calls:
            trace.collectives = numbered_collectives((start, end, start, name) for start, end, name in self.op_calls)
        else:
            trace.collectives = numbered_collectives((trace.starts[i], trace.ends[i], trace.launches[i], name)
                                                     for i, name in self.device_calls)
        trace.regions = regions_in_steps(self.steps, self.annotations)
        if self.counting or self.flops:
            counted = sorted(self.flops)
            trace.flop_starts = array("d", (start for start, _ in counted))
            trace.flop_counts = array("d", (flops for _, flops in counted))
            trace.uncounted = sorted(self.uncounted)
            peak = recorded_peak(trace.path)
            trace.peak = peak.as_dict() if peak is not None else None
        return trace


def _place(path: str) -> tuple[int | None, str]:
    """The rank and group of a trace view: rlprof's layout names them; else torch_npu's
    ``profiler_info_<rank>.json`` beside ``ASCEND_PROFILER_OUTPUT``, the group being the directory
    that holds the ranks' ``*_ascend_pt`` directories."""
    process = process_of(Path(path))
    if process is not None:
        return process[0], str(process[1])
    output = Path(path).resolve().parent
    capture = output.parent
    for candidate in sorted(capture.glob("profiler_info_*.json")):
        matched = RANK_FILE.search(candidate.name)
        if matched:
            return int(matched.group(1)), str(capture.parent)
    return None, str(output)

