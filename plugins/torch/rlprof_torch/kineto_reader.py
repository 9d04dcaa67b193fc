"""Kineto traces (torch.profiler, and vLLM/SGLang engine traces, which are Kineto too) read for the breakdown.

:func:`read_trace` turns one ``.json`` / ``.json.gz`` into the analysis's neutral
:class:`~rlprof.analysis.breakdown.TraceEvents`. It streams: ijson's C parser yields one event at a
time and only what the breakdown needs is kept (times in 8-byte columns), so memory follows the
number of kernels and ops, not the size of the file; a 2 GB file on one line reads like any other,
and one that is a single endless token is refused within its first 16 MB (:mod:`rlprof.analysis.streams`).

What is read, as Kineto writes it (torch 2.x, checked on traces this machine records):

* the header before ``traceEvents``: ``distributedInfo.rank``, ``baseTimeNanoseconds`` (``ts`` is µs
  after it), and rlprof's own ``rlprof`` block (rank, run, capture, the training step numbers);
* complete events (``ph: X``): device events of category ``kernel``, ``gpu_memcpy``, ``gpu_memset``,
  launched by a ``cuda_runtime`` / ``cuda_driver`` call with the same ``args.correlation``;
  host ops of category ``cpu_op`` and collectives of any category (``gloo:*``, ``c10d::*``, ...);
  regions: ``ProfilerStep#N`` and every other ``user_annotation``;
* FLOPs, where the capture asked for them (the header's ``with_flops``): each ``cpu_op``'s ``Input Dims``
  (and ``Concrete Inputs``) through :func:`rlprof.analysis.op_flops.op_flops`, since torch does not write the
  figure itself; the compute ops no formula counts by name; the peak rlprof recorded (``rlprof.peak``);
* memory samples (``profile_memory``): instant events ``[memory]`` whose ``args`` hold ``Total Allocated``
  (bytes allocated on the device after that change) and ``Device Type`` (0: the CPU, else an accelerator);
  a trace with device events keeps the accelerator's, a host-only trace the CPU's.
"""

from __future__ import annotations

import bisect
import gzip
import math
import re
from array import array
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import ijson

from rlprof.backend_api import (BoundedTokens, COMMUNICATION, COMPUTE, device_kind, is_host_collective, is_uncounted,
                                numbered_collectives, op_flops, Region, regions_in_steps, TraceEvents)

DEVICE_CATEGORIES = {"kernel": False, "gpu_memcpy": True, "gpu_memset": True}
"""Device event categories -> whether the event is a copy (memory) rather than a kernel."""
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
REGION_CATEGORIES = ("user_annotation", "cpu_op")  # ProfilerStep#N is a cpu_op in older Kineto
HEADER_TOKENS = 100_000
"""Kineto writes a few dozen fields before ``traceEvents``; a file with this many is something else."""
MEMORY_EVENT = "[memory]"
"""Kineto's name for a memory sample (``profile_memory=True``)."""
CPU_DEVICE_TYPE = 0
"""``args["Device Type"]`` of a memory sample of the CPU (c10's ``DeviceType::CPU``)."""
STEP_NAME = re.compile(r"ProfilerStep#(\d+)$")
PEAK_KEYS = ("tflops", "source", "device", "dtype", "measured_tflops", "refused")
HEADER_KEYS = {"distributedInfo.rank", "baseTimeNanoseconds", "rlprof.global_rank", "rlprof.run_id", "rlprof.capture",
               "rlprof.training_steps.item", "with_flops", *(f"rlprof.peak.{key}" for key in PEAK_KEYS)}


class NotKineto(ValueError):
    """The file is JSON but not a Kineto trace, or holds nothing the breakdown can split."""


def read_trace(path: str) -> TraceEvents:
    """The trace at ``path`` in the breakdown's neutral form.

    :raises NotKineto: JSON without ``traceEvents``, or with neither device events nor host ops.
    :raises OSError, EOFError, ValueError: unreadable, truncated, not JSON (ijson's errors are ValueErrors).
    """
    header, prefix = _header(path)
    reading = _Reading(path, header)
    with _open(path) as handle:
        for event in ijson.items(handle, prefix, use_float=True):
            if isinstance(event, dict) and event.get("ph") == "X":
                reading.take(event)
            elif isinstance(event, dict) and event.get("name") == MEMORY_EVENT:
                reading.memory(event)
    return reading.finish()


@contextmanager
def _open(path: str) -> Iterator[BoundedTokens]:
    """The file's (decompressed) bytes, refused at a token no trace has (:mod:`rlprof.analysis.streams`)."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as handle:
        yield BoundedTokens(handle)


def _header(path: str) -> tuple[dict[str, Any], str]:
    """The top-level fields written before ``traceEvents``, and the ijson prefix of the events."""
    header: dict[str, Any] = {}
    tokens = 0
    with _open(path) as handle:
        for prefix, kind, value in ijson.parse(handle, use_float=True):
            if prefix == "" and kind == "start_array":
                return header, "item"  # a bare list of events
            if prefix == "traceEvents" and kind == "start_array":
                return header, "traceEvents.item"
            if prefix in HEADER_KEYS and prefix.endswith(".item"):
                header.setdefault(prefix, []).append(value)
            elif prefix in HEADER_KEYS:
                header[prefix] = value
            if (prefix == "" and kind in ("string", "number", "boolean", "null")) or tokens > HEADER_TOKENS:
                break
            tokens += 1
    raise NotKineto("not a Kineto trace (no traceEvents list at its top)")


class _Reading:
    """What one pass over the events keeps."""

    def __init__(self, path: str, header: dict[str, Any]):
        rank = header.get("rlprof.global_rank", header.get("distributedInfo.rank"))
        group = (f"{header['rlprof.run_id']}/{header['rlprof.capture']}" if "rlprof.capture" in header
                 else str(Path(path).resolve().parent))
        base = header.get("baseTimeNanoseconds")
        self.trace = TraceEvents(path=path, rank=int(rank) if isinstance(rank, (int, float)) else None, device="cuda",
                                 group=group, clock_ms=float(base) / 1e6 if isinstance(base, (int, float)) else 0.0)
        training = header.get("rlprof.training_steps.item", [])
        self.only_step = int(training[0]) if len(training) == 1 else None
        self.origin: int | None = None
        """The first event's ``ts`` (whole us): times are kept after it, so a trace stamped in us since 1970
        (1.7e15) keeps its nanoseconds (ms since 1970 in a float lose a quarter of a microsecond at each
        end of every event, 2% of a 60 us region's compute, seen); ``clock_ms`` takes it back."""
        self.correlations = array("q")
        self.launched_at: dict[int, float] = {}
        self.device_names: list[str] = []
        self.host = TraceEvents(path=path, rank=None, device="cpu")
        self.host_collectives: list[tuple[Any, float, float, str]] = []
        self.annotations: list[tuple[str, float, float]] = []
        self.steps: list[Region] = []
        self.memory_samples: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        """``(ts, total allocated)`` of the CPU's samples (True) and the accelerators' (False)."""
        self.counting = "with_flops" in header
        """The capture asked for FLOPs: ``(tid, start, end, flops or name)`` of its matrix products and of the
        compute ops no formula counts, sorted out at :meth:`finish`."""
        self.flop_ops: list[tuple[Any, float, float, Any]] = []
        if self.counting:
            self.trace.peak = {key: header[f"rlprof.peak.{key}"] for key in PEAK_KEYS if f"rlprof.peak.{key}" in header} or None

    def memory(self, event: dict[str, Any]) -> None:
        args = event.get("args")
        ts = event.get("ts")
        if not isinstance(args, dict) or not isinstance(ts, (int, float)):
            return
        allocated, device = args.get("Total Allocated"), args.get("Device Type")
        if isinstance(allocated, (int, float)) and isinstance(device, (int, float)):
            self.memory_samples[device == CPU_DEVICE_TYPE].append((ts, float(allocated)))

    def take(self, event: dict[str, Any]) -> None:
        category, name = event.get("cat", ""), event.get("name", "")
        ts, dur = event.get("ts"), event.get("dur", 0.0)
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or not isinstance(name, str):
            return
        if self.origin is None:
            self.origin = math.floor(ts)
        start, end = (ts - self.origin) / 1000.0, (ts - self.origin + dur) / 1000.0
        if category in DEVICE_CATEGORIES:
            kind = device_kind(name, DEVICE_CATEGORIES[category])
            self.trace.add(start, end, kind, math.inf)
            self.correlations.append(_correlation(event))
            if kind == COMMUNICATION:
                self.device_names.append(name)
            return
        if category in RUNTIME_CATEGORIES:
            self.launched_at[_correlation(event)] = start
            return
        step = STEP_NAME.match(name)
        if step and category in REGION_CATEGORIES:  # a region, never an op (older Kineto files it as a cpu_op)
            self.steps.append(Region(name, int(step.group(1)), start, end))
            return
        if self.counting and category == "cpu_op":
            flops = op_flops(name, event.get("args"))
            if flops is not None or is_uncounted(name):
                self.flop_ops.append((event.get("tid"), start, end, flops if flops is not None else name))
        collective = is_host_collective(name)
        if (category == "cpu_op" or collective) and not len(self.trace.kinds):  # host ops matter only without device events
            self.host.add(start, end, COMMUNICATION if collective else COMPUTE)
            if collective:
                self.host_collectives.append((event.get("tid"), start, end, name))
        elif category == "user_annotation" and not collective:
            self.annotations.append((name, start, end))

    def finish(self) -> TraceEvents:
        trace = self.trace
        trace.clock_ms += (self.origin or 0) / 1000.0
        if len(trace.kinds):
            self.host = TraceEvents(path=trace.path, rank=None, device="cpu")
            for index, correlation in enumerate(self.correlations):
                trace.launches[index] = self.launched_at.get(correlation, math.inf)
            trace.collectives = numbered_collectives((trace.starts[i], trace.ends[i], trace.launches[i], name)
                                          for i, name in zip(self._communication_indices(), self.device_names))
        elif len(self.host.kinds):
            trace.device = "cpu"
            trace.starts, trace.ends, trace.kinds, trace.launches = (self.host.starts, self.host.ends, self.host.kinds,
                                                                     self.host.launches)
            trace.collectives = numbered_collectives((start, end, None, name) for start, end, name in _outermost(self.host_collectives))
        else:
            raise NotKineto("no device events and no host ops")
        trace.regions = regions_in_steps(self.steps, self.annotations, default_step=self.only_step)
        if self.counting:
            _count(trace, self.flop_ops)
        origin = self.origin or 0
        for ts, allocated in sorted(self.memory_samples[trace.device == "cpu"]):
            trace.memory_times.append((ts - origin) / 1000.0)
            trace.memory_allocated.append(allocated)
        return trace

    def _communication_indices(self) -> Iterator[int]:
        return (i for i, kind in enumerate(self.trace.kinds) if kind == COMMUNICATION)


def _correlation(event: dict[str, Any]) -> int:
    args = event.get("args") or {}
    value = args.get("correlation", -1) if isinstance(args, dict) else -1
    return int(value) if isinstance(value, (int, float)) else -1


def _outermost(calls: list[tuple[Any, float, float, str]]) -> Iterator[tuple[float, float, str]]:
    """The collectives no other collective of the same thread contains (``c10d::allreduce_`` and not the
    ``record_param_comms`` inside it): one per call, as every rank records it."""
    kept_end: dict[Any, float] = {}
    for tid, start, end, name in sorted(calls, key=lambda c: (str(c[0]), c[1], -c[2])):
        if start < kept_end.get(tid, -math.inf):
            continue
        kept_end[tid] = end
        yield start, end, name


def _count(trace: TraceEvents, ops: list[tuple[Any, float, float, Any]]) -> None:
    """Put the counted operators' FLOPs and the uncounted ones' names in ``trace``: per thread, a counted op inside
    another counted op is not counted again, and an uncounted op with a counted op inside it (SDPA's math path,
    through ``bmm``) is counted through that one."""
    counted: list[tuple[float, float]] = []
    uncounted: list[tuple[float, str]] = []
    by_thread: dict[Any, list[tuple[float, float, Any]]] = {}
    for tid, start, end, what in ops:
        by_thread.setdefault(str(tid), []).append((start, end, what))
    for calls in by_thread.values():
        calls.sort(key=lambda c: (c[0], -c[1]))
        starts = [c[0] for c in calls if not isinstance(c[2], str)]
        outer_end = -math.inf
        for start, end, what in calls:
            if isinstance(what, str):
                inside = bisect.bisect_left(starts, start)
                if inside >= len(starts) or starts[inside] > end:
                    uncounted.append((start, what))
            elif start >= outer_end:
                counted.append((start, what))
                outer_end = end
    counted.sort()
    trace.flop_starts = array("d", (start for start, _ in counted))
    trace.flop_counts = array("d", (flops for _, flops in counted))
    trace.uncounted = sorted(uncounted)
