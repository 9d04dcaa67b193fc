"""One Chrome trace for a whole run, from its manifests (``rlprof timeline``, :mod:`rlprof.cli.timeline`).

Use it to see every rank of a run side by side in Perfetto (https://ui.perfetto.dev),
chrome://tracing or Holistic Trace Analysis, instead of opening one file per rank per capture.
From the manifests alone it writes a Chrome trace-event JSON file with

* one process per profiling process, named ``rank 0 · actor+rollout+ref (node1)`` for a trainer
  rank and ``replica 0 · rollout (node1)`` for a rollout replica (agent-loop mode), trainer ranks
  first, each sorted by number;
* a track (thread) per role, holding that role's regions of every profiled step as slices
  (nested regions nest), with step, capture, sampled iterations and any error as arguments;
* a ``steps`` track per process with one slice per profiled step, named ``ProfilerStep#<step>`` as
  torch.profiler names steps (HTA numbers iterations by that name), and a marker where each step begins;
* in a run where rollout and training overlap (:mod:`rlprof.analysis.overlap`: a step is a parameter
  version), a ``parameter versions`` process on top instead of the step markers: a slice per version's
  window, a slice per weight sync end to end, a marker where each version begins, and an arrow from the
  trainer's ``actor_weight_send`` to each replica's ``rollout_weight_load`` of the version.

``--with-traces`` also merges the events of the Chrome traces the backends wrote (the files each backend's
own reader claims as Chrome traces: rlprof-torch's ``*.pt.trace.json.gz``, a plugin's own kind) for the steps asked, each under its rank's process on tracks named
``torch · <thread>``, placed on the manifest's clock (:mod:`rlprof.analysis.traces` explains the alignment).
Times in the file are microseconds since the run's first recorded step (``otherData.rlprof.origin_ns``).

Without ``-o`` the command writes ``timeline.json`` (:data:`DEFAULT_OUTPUT`) in the working directory, or
``timeline.1.json``... when that exists; an existing ``-o FILE`` is replaced only with ``--force``
(:mod:`rlprof.cli.output_file`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

from rlprof.analysis.anatomy import process_name, process_order, replica_ranks, timing_record
from rlprof.analysis.overlap import LOAD, SEND, VersionOverlap, overlap_of
from rlprof.analysis.runs import role_index
from rlprof.analysis.traces import TraceFiles, clock_offset_ns, load_trace

STEPS_TID = 0
"""The ``steps`` track of every process; roles follow at ``1 + role index``; merged trace tracks from :data:`TRACE_TID`."""
TRACE_TID = 1000
ID_STRIDE = 1 << 40
"""Flow/async ids of the n-th merged file are offset by ``n * ID_STRIDE`` (Kineto's ids are far smaller)."""
MERGED_PHASES = frozenset({"X", "B", "E", "i", "I", "C", "s", "t", "f", "b", "n", "e"})
"""Trace-event phases copied by ``--with-traces`` (metadata ``M`` events are turned into track names instead)."""


@dataclass
class TimelineProcess:
    """One profiling process of the run, as a process in the timeline."""

    key: tuple[int, str, int]
    """(rank, host, pid) from the manifest (a replica's rank may equal a trainer rank's: the pid tells them apart)."""
    pid: int
    """Its process id in the timeline file (1, 2, ... trainer ranks, then replicas)."""
    roles: list[str] = field(default_factory=list)
    tracks: dict[str, int] = field(default_factory=dict)
    """Track name -> tid in the timeline file."""
    replica_rank: int | None = None

    @property
    def name(self) -> str:
        rank, host, _ = self.key
        return f"{process_name(rank, self.replica_rank)} · {'+'.join(self.roles) or '?'} ({host})"

    def track(self, name: str, tid: int | None = None) -> int:
        if name not in self.tracks:
            self.tracks[name] = tid if tid is not None else TRACE_TID + sum(1 for t in self.tracks.values() if t >= TRACE_TID)
        return self.tracks[name]


def build_timeline(records: Sequence[dict[str, Any]], *, steps: Iterable[int] | None = None, with_traces: bool = False,
                   warn: Callable[[str], None] = lambda line: None) -> Iterator[dict[str, Any]]:
    """The trace events of one run (its records from every node), metadata first.

    :param steps: only these profiled steps (default: all).
    :param with_traces: merge the events of the Chrome traces of those steps.
    :param warn: told about each trace that could not be merged and why.
    :raises ValueError: no ``step`` or ``region`` record for the steps asked (nothing to draw).
    """
    wanted = set(steps) if steps is not None else None
    timed = [r for r in records if timing_record(r) and (wanted is None or r["step"] in wanted)]
    if not timed:
        raise ValueError("no step or region timings in the manifest" + (f" for steps {sorted(wanted)}" if wanted else ""))
    origin = min(r["start_ns"] for r in timed)
    processes = _processes(records, timed)

    for proc in processes.values():
        yield _meta("process_name", proc.pid, 0, name=proc.name)
        yield _meta("process_sort_index", proc.pid, 0, sort_index=proc.pid)
        proc.track("steps", STEPS_TID)
        for role in proc.roles:
            proc.track(role, 1 + role_index(role))

    overlap = overlap_of(records)
    versions = [v for v in overlap.versions if wanted is None or v.step in wanted] if overlap is not None else []
    slices: dict[tuple, tuple[int, int, float]] = {}
    """(process key, step, region) -> the timeline pid, tid and ts of its first slice (the weight syncs' arrows)"""
    step_starts: dict[int, int] = {}
    for r in sorted(timed, key=lambda r: (r["start_ns"], -r["end_ns"])):
        proc = processes[_key(r)]
        ts, dur = (r["start_ns"] - origin) / 1000.0, (r["end_ns"] - r["start_ns"]) / 1000.0
        if r["type"] == "step":
            step_starts[r["step"]] = min(step_starts.get(r["step"], r["start_ns"]), r["start_ns"])
            yield {"ph": "X", "cat": "rlprof.step", "name": f"ProfilerStep#{r['step']}", "pid": proc.pid, "tid": STEPS_TID,
                   "ts": ts, "dur": dur, "args": {"step": r["step"], "duration_ms": r.get("duration_ms")}}
        else:
            role = r.get("role") or "?"
            tid = proc.track(role, 1 + role_index(role))
            args = {k: r.get(k) for k in ("step", "role", "capture", "iterations", "marked_iterations", "duration_ms", "parent")}
            if r.get("error"):
                args["error"] = r["error"]
            yield {"ph": "X", "cat": "rlprof.region", "name": r["region"], "pid": proc.pid, "tid": tid, "ts": ts, "dur": dur,
                   "args": args}
            if versions and r["region"] in SYNC_ENDS:
                slices.setdefault((_key(r), r["step"], r["region"]), (proc.pid, tid, ts))
    if versions:
        yield from _version_events(versions, processes, slices, origin)
    else:
        for step, start in sorted(step_starts.items()):
            yield {"ph": "i", "s": "g", "cat": "rlprof.step", "name": f"step {step} begins", "pid": 0, "tid": 0,
                   "ts": (start - origin) / 1000.0}

    if with_traces:
        yield from _merged_trace_events(records, processes, origin, wanted, warn)
    for proc in processes.values():
        for name, tid in proc.tracks.items():
            yield _meta("thread_name", proc.pid, tid, name=name)
            yield _meta("thread_sort_index", proc.pid, tid, sort_index=tid)


SYNC_ENDS = (SEND, LOAD)
"""The regions a weight sync's arrows join: the trainer's send, each replica's load."""
VERSIONS_PID = 0
"""The ``parameter versions`` process of an async run's timeline (sorted above every rank)."""


def _version_events(versions: list[VersionOverlap], processes: dict[tuple, TimelineProcess],
                    slices: dict[tuple, tuple[int, int, float]], origin: int) -> Iterator[dict[str, Any]]:
    """An async run's parameter versions (:mod:`rlprof.analysis.overlap`): a ``parameter versions`` process
    with a ``versions`` track (a slice per version's window) and a ``weight syncs`` track (a slice per
    sync, end to end), a marker where each version begins, and an arrow from the trainer's
    ``actor_weight_send`` to each replica's ``rollout_weight_load`` of the version (a flow event)."""
    yield _meta("process_name", VERSIONS_PID, 0, name="parameter versions")
    yield _meta("process_sort_index", VERSIONS_PID, 0, sort_index=-1)
    for tid, name in enumerate(("versions", "weight syncs")):
        yield _meta("thread_name", VERSIONS_PID, tid, name=name)
        yield _meta("thread_sort_index", VERSIONS_PID, tid, sort_index=tid)
    trainer = [key for key, proc in processes.items() if proc.replica_rank is None]
    replicas = [key for key, proc in processes.items() if proc.replica_rank is not None]
    for v in versions:
        args = {"step": v.step, "window_ms": round(v.window_ms, 3), "overlap_ms": v.overlap_ms, "sync_ms": v.sync_ms,
                "staleness": v.staleness}
        yield {"ph": "X", "cat": "rlprof.version", "name": f"version {v.step}", "pid": VERSIONS_PID, "tid": 0,
               "ts": (v.start_ns - origin) / 1000.0, "dur": (v.end_ns - v.start_ns) / 1000.0, "args": args}
        yield {"ph": "i", "s": "g", "cat": "rlprof.version", "name": f"version {v.step} begins", "pid": VERSIONS_PID,
               "tid": 0, "ts": (v.start_ns - origin) / 1000.0}
        if v.sync_ns is None:
            continue
        yield {"ph": "X", "cat": "rlprof.sync", "name": f"weight sync to version {v.step}", "pid": VERSIONS_PID, "tid": 1,
               "ts": (v.sync_ns[0] - origin) / 1000.0, "dur": (v.sync_ns[1] - v.sync_ns[0]) / 1000.0,
               "args": {"step": v.step, "sync_ms": v.sync_ms}}
        sender = next((slices[key, v.step, SEND] for key in sorted(trainer) if (key, v.step, SEND) in slices), None)
        if sender is None:
            continue
        for key in replicas:
            loaded = slices.get((key, v.step, LOAD))
            if loaded is None:
                continue
            flow = f"sync{v.step}-{processes[key].replica_rank}"
            yield {"ph": "s", "cat": "rlprof.sync", "name": "weights", "id": flow, "pid": sender[0], "tid": sender[1],
                   "ts": sender[2]}
            yield {"ph": "f", "bp": "e", "cat": "rlprof.sync", "name": "weights", "id": flow, "pid": loaded[0],
                   "tid": loaded[1], "ts": loaded[2]}


def _processes(records: Sequence[dict[str, Any]], timed: list[dict[str, Any]]) -> dict[tuple, TimelineProcess]:
    roles: dict[tuple, list[str]] = {}
    for r in records:
        if r.get("type") == "process":
            known = roles.setdefault(_key(r), [])
            known += [x for x in r.get("roles", []) if x not in known]
        elif r.get("type") == "region":
            known = roles.setdefault(_key(r), [])
            if r.get("role") and r["role"] not in known:
                known.append(r["role"])
    replicas = replica_ranks(records)
    keys = sorted({_key(r) for r in timed}, key=lambda k: (process_order(k[0], replicas.get(k)), k[1], k[2]))
    return {key: TimelineProcess(key, index + 1, sorted(roles.get(key, []), key=role_index), replica_rank=replicas.get(key))
            for index, key in enumerate(keys)}


def _merged_trace_events(records, processes, origin, wanted, warn) -> Iterator[dict[str, Any]]:
    anchors: dict[tuple, dict[str, int]] = {}
    for r in records:
        if r.get("type") == "region" and timing_record(r):
            per_capture = anchors.setdefault((_key(r), r.get("capture")), {})
            per_capture[r["region"]] = min(per_capture.get(r["region"], r["start_ns"]), r["start_ns"])
    seen: set[str] = set()
    artifacts = [r for r in records if r.get("type") == "artifact"]
    files = TraceFiles(str(a.get("backend")) for a in artifacts)
    for line in files.problems:
        warn(line)
    for file_index, a in enumerate(artifacts):
        proc = processes.get(_key(a))
        steps = set(a.get("steps") or [])
        if proc is None or (wanted is not None and not steps & wanted):
            continue
        for path in files.chrome_traces(str(a.get("backend")), Path(a["_run_dir"]) / a["path"]):
            if str(path) in seen:
                continue
            seen.add(str(path))
            try:
                trace = load_trace(path)
            except (OSError, ValueError) as exc:
                warn(f"{path}: not merged: {type(exc).__name__}: {exc}")
                continue
            clock = clock_offset_ns(trace, anchors.get((_key(a), a.get("capture")), {}))
            if clock is None:
                warn(f"{path}: not merged: no clock (no baseTimeNanoseconds, no epoch timestamps, no rlprof range to align on)")
                continue
            yield from _events_of(trace, proc, (clock[0] - origin) / 1000.0, len(seen), a.get("backend", "trace"), a.get("pid"))


def _events_of(trace: dict[str, Any], proc: TimelineProcess, shift_us: float, file_number: int, backend: str,
               os_pid: int | None) -> Iterator[dict]:
    """A trace's events moved into ``proc`` on the timeline's clock; its threads become ``<backend> · <thread>``
    tracks (``<backend> · <device> / <stream>`` for the trace's other processes, such as GPUs). The
    trace's name for the host process (``ray::PolicyWorker.rlprof_step_boundary``) is dropped: the
    timeline's process already says which rank it is."""
    events = trace.get("traceEvents", [])
    names: dict[tuple, str] = {}
    process_names: dict[Any, str] = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M":
            label = (e.get("args") or {}).get("name")
            if e.get("name") == "thread_name" and label:
                names[e.get("pid"), e.get("tid")] = str(label)
            elif e.get("name") == "process_name" and label:
                process_names[e.get("pid")] = str(label)
    for e in events:
        if not isinstance(e, dict) or e.get("ph") not in MERGED_PHASES or not isinstance(e.get("ts"), (int, float)):
            continue
        where = (e.get("pid"), e.get("tid"))
        label = names.get(where) or (f"thread {where[1]}" if isinstance(where[1], int) else str(where[1] or "?"))
        owner = process_names.get(where[0]) or (str(where[0]) if not isinstance(where[0], int) else None)
        if owner and where[0] != os_pid:  # a device, or Kineto's "Spans"
            label = f"{owner} / {label}"
        out = dict(e)
        out["pid"], out["tid"] = proc.pid, proc.track(f"{backend} · {label}")
        out["ts"] = e["ts"] + shift_us
        if out.get("s") == "g":  # Kineto's window markers: keep them with their rank, not across the whole timeline
            out["s"] = "p"
        if "id" in out:  # flow and async ids are per file: keep files apart
            out["id"] = _file_id(file_number, out["id"])
        yield out


def _file_id(file_number: int, event_id: Any) -> int | str:
    """An event id made unique across merged files (an integer where the original is one, as Kineto's are)."""
    try:
        return file_number * ID_STRIDE + int(event_id)
    except (TypeError, ValueError):
        return f"{file_number}:{event_id}"


def _key(record: dict[str, Any]) -> tuple[int, str, int]:
    return (record["rank"], record.get("host", "?"), record.get("pid", 0))


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": args}


DEFAULT_OUTPUT = "timeline.json"
"""Where the timeline goes without ``-o`` (in the working directory; ``timeline.1.json``... when taken)."""


def write_timeline(events: Iterable[dict[str, Any]], handle: IO[str], other: dict[str, Any]) -> int:
    """Stream the events into ``handle`` as one trace-event JSON document (the command opens it so that an
    interrupted write leaves nothing half-written: :meth:`rlprof.cli.output_file.Target.writing`); returns how many."""
    count = 0
    handle.write('{"displayTimeUnit": "ms", "otherData": {"rlprof": ' + json.dumps(other) + '}, "traceEvents": [\n')
    for event in events:
        handle.write((",\n" if count else "") + json.dumps(event, separators=(",", ":")))
        count += 1
    handle.write("\n]}\n")
    return count


