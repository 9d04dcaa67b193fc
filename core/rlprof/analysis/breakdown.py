"""Inside a region: compute, communication, copies and idle, as rows of one schema.

A backend's reader turns its trace file into :class:`TraceEvents` (neutral: times in ms on the
trace's clock, each event already classed by :func:`device_kind` or :func:`is_host_collective`);
:func:`split` turns that into one :class:`Row` per region, and :func:`apportion_waits` splits each
row's communication into waiting for the last rank and transfer, from the collectives of every
rank's trace. The definitions are written once, in docs/analysis.md ("Inside a region"); every
figure is a length of a union of intervals (:mod:`rlprof.intervals`), never a sum of durations. Each column of a
row is declared once, in the row model (:mod:`rlprof.row_model`).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from rlprof.analysis.achieved import counted
from rlprof.analysis.clocks import host_clocks
from rlprof.intervals import Union, clip, difference, intersection, length, union
from rlprof.layout import host_of
from rlprof.row_model import Row, derive

COMPUTE, COMMUNICATION, MEMORY = 0, 1, 2
"""The classes of work (stored in a byte array, one per event)."""

DEVICE_COLLECTIVE_PREFIXES = ("nccl", "hccl", "rccl")
"""Kernels whose name begins so are collectives (HTA classes NCCL kernels the same way)."""

HOST_COLLECTIVE_PREFIXES = ("gloo:", "nccl:", "c10d::", "record_param_comms")
"""Host ops whose name begins so are collectives, at any depth and in any category."""

TRACE_REGION = "(trace)"
"""The name of the whole-trace row."""


def device_kind(name: str, memory: bool, collectives: Sequence[str] = ()) -> int:
    """The class of a device event: MEMORY for a memcpy/memset (``memory``), COMMUNICATION for a
    kernel named like a collective (or with a prefix the backend declares in ``collectives``), else COMPUTE."""
    if memory:
        return MEMORY
    if name.startswith(DEVICE_COLLECTIVE_PREFIXES) or (collectives and name.startswith(tuple(collectives))):
        return COMMUNICATION
    return COMPUTE


def is_host_collective(name: str) -> bool:
    return name.startswith(HOST_COLLECTIVE_PREFIXES)


@dataclass(frozen=True)
class Region:
    """A named interval of one process: a role region, a ``ProfilerStep#N``, a user annotation."""

    name: str
    step: int | None
    start: float
    end: float


@dataclass(frozen=True)
class Collective:
    """One call of a collective on one process, for matching the same call across ranks: the ``ordinal``-th
    ``name`` of this process. ``launch`` is its runtime call's start for a device kernel, None for a host op."""

    name: str
    ordinal: int
    start: float
    end: float
    launch: float | None


def numbered_collectives(calls: Iterable[tuple[float, float, float | None, str]]) -> list[Collective]:
    """``(start, end, launch, name)`` calls of one trace as :class:`Collective` s, each name's calls numbered in
    start order (the n-th on one rank is the n-th on the others). A launch not seen (None or inf) is None.
    Every reader numbers its collectives here, so traces of different backends match alike."""
    seen: dict[str, int] = {}
    numbered = []
    for start, end, launch, name in sorted(calls, key=lambda c: c[0]):
        numbered.append(Collective(name, seen.get(name, 0), start, end,
                                   None if launch is None or launch == math.inf else launch))
        seen[name] = seen.get(name, 0) + 1
    return numbered


def regions_in_steps(steps: Iterable[Region], annotations: Iterable[tuple[str, float, float]],
                     default_step: int | None = None) -> list[Region]:
    """A trace's regions: its step ranges, and each ``(name, start, end)`` annotation with the step whose
    range holds its start (``default_step`` where none does), ordered by start, outer first."""
    steps = sorted(steps, key=lambda region: region.start)
    starts = [step.start for step in steps]

    def step_at(time: float) -> int | None:
        index = bisect.bisect_right(starts, time) - 1
        return steps[index].step if index >= 0 and time <= steps[index].end else default_step

    regions = steps + [Region(name, step_at(start), start, end) for name, start, end in annotations]
    return sorted(regions, key=lambda region: (region.start, -region.end))


@dataclass
class TraceEvents:
    """What a reader gives the analysis for one process's trace. Times are ms on the trace's clock
    (``clock_ms`` added makes them wall-clock ms, the same for every process of a host).

    Work is kept in columns (8 bytes a figure), so memory grows with the number of events the
    analysis needs, not with the size of the file. A device event's ``launch`` is the start of the
    runtime call that launched it (matched by correlation id); a host op's is NaN.
    """

    path: str
    rank: int | None
    device: str
    """``cuda``, ``npu`` or ``cpu`` (a trace with no device event: its host ops are split)."""
    group: str = ""
    """Traces of one group are the ranks of one job at one time: their collectives are matched."""
    clock_ms: float = 0.0
    regions: list[Region] = field(default_factory=list)
    starts: array = field(default_factory=lambda: array("d"))
    ends: array = field(default_factory=lambda: array("d"))
    launches: array = field(default_factory=lambda: array("d"))
    kinds: array = field(default_factory=lambda: array("b"))
    collectives: list[Collective] = field(default_factory=list)
    memory_times: array = field(default_factory=lambda: array("d"))
    """When the memory the profiler tracks changed (ms on the trace's clock, in order; empty: the capture
    recorded no memory): torch's ``profile_memory`` samples, of the trace's device."""
    memory_allocated: array = field(default_factory=lambda: array("d"))
    """The bytes allocated after each of those changes."""
    flop_starts: array | None = None
    """Where the capture counted FLOPs (None: it did not): each counted operator's start (ms, in order)..."""
    flop_counts: array = field(default_factory=lambda: array("d"))
    """...and its FLOPs (:mod:`rlprof.analysis.op_flops`)."""
    uncounted: list[tuple[float, str]] = field(default_factory=list)
    """``(start, name)`` of each compute operator no formula counts (attention kernels...), in order."""
    peak: Mapping[str, Any] | None = None
    """The peak the capture recorded for its device (:class:`rlprof.peak.Peak` as a dict)."""

    def add(self, start: float, end: float, kind: int, launch: float = math.nan) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.kinds.append(kind)
        self.launches.append(launch)


def split(trace: TraceEvents) -> list[Row]:
    """One row per region of ``trace`` plus the whole-trace row, ordered as the regions are."""
    if trace.device == "cpu":
        return _split_host(trace)
    return _split_device(trace)


def _split_device(trace: TraceEvents) -> list[Row]:
    launch = trace.launches.__getitem__
    order = sorted(range(len(trace.kinds)), key=launch)
    rows = []
    for region in trace.regions:
        chosen = order[bisect.bisect_left(order, region.start, key=launch):bisect.bisect_right(order, region.end, key=launch)]
        end = max([region.end] + [trace.ends[i] for i in chosen])
        rows.append(_device_row(trace, region, (region.start, end), chosen))
    del order
    if len(trace.kinds):
        everything = range(len(trace.kinds))
        span = (min(trace.starts), max(trace.ends))
        rows.append(_device_row(trace, Region(TRACE_REGION, None, *span), span, everything))
    return rows


def _device_row(trace: TraceEvents, region: Region, window: tuple[float, float], chosen: Sequence[int]) -> Row:
    def of_kind(kind: int) -> Union:  # one class at a time: a whole trace's intervals are never all held at once
        return clip(union((trace.starts[i], trace.ends[i]) for i in chosen if trace.kinds[i] == kind), *window)

    compute, communication, memory = of_kind(COMPUTE), of_kind(COMMUNICATION), of_kind(MEMORY)
    kernels = union(compute + communication)
    overlap = length(intersection(compute, communication))
    busy = length(union(kernels + memory))
    return _row(trace, region, window, compute=length(compute), communication=length(communication),
                memory=length(memory), exposed_memory=length(difference(memory, kernels)), overlap=overlap, busy=busy)


def _split_host(trace: TraceEvents) -> list[Row]:
    ops: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for start, end, kind in zip(trace.starts, trace.ends, trace.kinds):
        ops[kind].append((start, end))
    communication = union(ops[COMMUNICATION])
    others = union(ops[COMPUTE] + ops[MEMORY])
    busy = union(others + communication)
    rows = []
    regions = list(trace.regions)
    if busy:
        regions.append(Region(TRACE_REGION, None, busy[0][0], busy[-1][1]))
    for region in regions:
        window = (region.start, region.end)
        comm = clip(communication, *window)
        rows.append(_row(trace, region, window, compute=length(difference(clip(others, *window), comm)),
                         communication=length(comm), memory=0.0, exposed_memory=0.0, overlap=0.0,
                         busy=length(clip(busy, *window))))
    return rows


def peak_allocated(trace: TraceEvents, start: float, end: float) -> float | None:
    """The most bytes allocated between ``start`` and ``end``: the last sample at or before ``start`` and every
    sample up to ``end``; None when the trace recorded no memory, or none until ``end``."""
    times = trace.memory_times
    first = bisect.bisect_right(times, start) - 1
    last = bisect.bisect_right(times, end)
    chosen = trace.memory_allocated[max(first, 0):last]
    return max(chosen) if len(chosen) else None


def _row(trace: TraceEvents, region: Region, window: tuple[float, float], *, compute: float, communication: float,
         memory: float, exposed_memory: float, overlap: float, busy: float) -> Row:
    window_ms = window[1] - window[0]
    row = Row(peak_allocated_bytes=peak_allocated(trace, *window), path=trace.path, rank=trace.rank, step=region.step, region=region.name, device=trace.device,
               start_ms=region.start, end_ms=region.end, wall_ms=region.end - region.start, window_ms=window_ms,
               compute_ms=compute, communication_ms=communication, memory_ms=memory, exposed_memory_ms=exposed_memory,
               overlap_ms=overlap, exposed_communication_ms=communication - overlap, idle_ms=max(0.0, window_ms - busy),
              **counted(trace, region.start, region.end))
    derive(row)
    return row


@dataclass(frozen=True)
class Wait:
    """The part of one collective spent before the last rank's matching call began."""

    start: float
    end: float
    launch: float | None
    late_rank: int | None
    name: str


def apportion_waits(traces: Sequence[tuple[TraceEvents, list[Row]]]) -> None:
    """Fill each row's ``communication_wait_ms`` / ``communication_transfer_ms`` / ``waited_for_rank`` / ``waited_in``.

    Within a group, the ``ordinal``-th call of a collective name on each trace is one collective; on
    every rank the wait is from its own start until the last rank's call starts (wall clock: the
    traces' ``clock_ms`` added, and across hosts the offset of :func:`~rlprof.analysis.clocks.host_clocks`),
    the transfer is the rest. A trace alone in its group gets None.
    """
    groups: dict[str, list[tuple[TraceEvents, list[Row]]]] = defaultdict(list)
    for trace, rows in traces:
        groups[trace.group].append((trace, rows))
    for members in groups.values():
        if len(members) < 2:
            continue
        group = [trace for trace, _ in members]
        hosts = [host_of(trace.path) for trace in group]
        clocks = host_clocks(group, hosts=hosts)
        aligned = [clocks[host or ""] if clocks else None for host in hosts]
        waits = _waits(group, [trace.clock_ms + (clock.offset_ms if clock else 0.0) for trace, clock in zip(group, aligned)])
        for (trace, rows), parts, clock in zip(members, waits, aligned):
            for row in rows:
                _fill_wait(trace, row, parts)
                if clock is not None:
                    row.clock_offset_ms, row.clock_residual_ms = clock.offset_ms, clock.residual_ms


def _waits(traces: list[TraceEvents], clock_ms: list[float]) -> list[list[Wait]]:
    calls: dict[tuple[str, int], list[tuple[int, Collective]]] = defaultdict(list)
    for index, trace in enumerate(traces):
        for call in trace.collectives:
            calls[(call.name, call.ordinal)].append((index, call))
    waits: list[list[Wait]] = [[] for _ in traces]
    for arrivals in calls.values():
        if len(arrivals) < 2:
            continue
        last_index, last = max(arrivals, key=lambda a: a[1].start + clock_ms[a[0]])
        last_start = last.start + clock_ms[last_index]
        for index, call in arrivals:
            if index == last_index:  # the last to arrive waits for nobody (its own start, shifted to the shared
                continue             # clock and back, can come back a rounding error later: a wait for itself)
            until = min(call.end, last_start - clock_ms[index])
            if until > call.start:
                waits[index].append(Wait(call.start, until, call.launch, traces[last_index].rank, call.name))
    return waits


def _fill_wait(trace: TraceEvents, row: Row, parts: list[Wait]) -> None:
    window = (row.start_ms, row.start_ms + row.window_ms)
    if row.region == TRACE_REGION or trace.device == "cpu":
        inside = [w for w in parts if w.start < window[1] and w.end > window[0]]
    else:
        inside = [w for w in parts if w.launch is not None and row.start_ms <= w.launch <= row.end_ms]
    waited = length(clip(union((w.start, w.end) for w in inside), *window))
    row.communication_wait_ms = min(waited, row.communication_ms)
    row.communication_transfer_ms = row.communication_ms - row.communication_wait_ms
    if inside:
        longest = max(inside, key=lambda w: w.end - w.start)
        row.waited_for_rank, row.waited_in = longest.late_rank, longest.name


def row_fields(row: Row) -> Mapping[str, object]:
    """The row as JSON: every field, times rounded to the nanosecond."""
    return {name: round(value, 6) if isinstance(value, float) else value for name, value in vars(row).items()}
