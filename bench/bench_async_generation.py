"""Does a capture's end stall generation? A rollout replica's generation rate while its capture ends, against
its rate outside captures (issue 43: >= 70%).

The replica is ``rlprof demo --async``'s (:class:`rlprof.demo.async_replica.RolloutReplica`: a Ray actor with
the demo's tiny policy, one generating thread that makes every Profiler call, torch backend, contents
``cpu``), generating without pause: its sample queue never holds it (nobody trains; the limit is set out of
reach), and this script plays the trainer's weight syncs, one every ``--version-s`` seconds. Every
``--every``-th version is profiled (2, 8, 14, ... by default; none of the last two, so each export ends
while the replica still generates). Outside captures: the time from version 2 on that is in no capture and
no capture's end, in pieces of at least half a second (their median rate is the baseline).

Per capture it times, inside the replica's process:

* **stop**: the replica's ``step_boundary()`` that closes the capture, on the generating thread (Kineto's
  stop must run on the thread that started the capture, so generation waits for it there);
* **export**: the background writer's work on that trace (:func:`rlprof.runtime.trace_writer.compress`:
  torch's export of plain JSON, freeing torch's result, gzip, sha256, placing), beside the generating thread;
* **end**: from the stop's start to the export's end, the window the acceptance criterion names;

and prints the generation rate (tokens a second, from the replica's own per-decode-step record) in each, as
a share of the median baseline rate, medians over the captures. Two paths, one replica each, one after
the other in the same run: ``nogil`` (the torch backend's GIL-free stop, export and free: this tree's) and
``torch`` (``RLPROF_TORCH_NOGIL=0``: torch's own calls, which hold the GIL: the path before issue 41).

This is the demo's replica, not a vLLM engine: there, vLLM stops its profiler inside its own busy loop
(bench_vllm_stop.py times that), and the replica only compresses the engine's plain JSON on the writer.

Run: ``flock /tmp/rlprof-heavy.lock python bench/bench_async_generation.py [--versions 26] [--every 6]
[--version-s 1.5] [--dump FILE]`` (``--load FILE`` prints a dumped run again).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rlprof.demo.async_replica import RolloutReplica

EVERY = 6
"""Every sixth version is profiled, from version 2 (a capture's end takes about three versions of 1.5 s here)."""
PIECE_S = 0.5
"""The shortest stretch of time outside captures whose rate counts in the baseline."""


class TimedReplica(RolloutReplica):
    """The demo's replica, with the capture's end timed in its own process (the bench's instrument only)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from rlprof.runtime import trace_writer

        self.boundaries: list[tuple[int, int]] = []
        self.exports: list[tuple[int, int]] = []
        boundary, compress = self.profiler.step_boundary, trace_writer.compress

        def timed_boundary(*a, **k):
            began = time.time_ns()
            try:
                return boundary(*a, **k)
            finally:
                self.boundaries.append((began, time.time_ns()))

        def timed_compress(export):
            began = time.time_ns()
            try:
                return compress(export)
            finally:
                self.exports.append((began, time.time_ns()))

        self.profiler.step_boundary = timed_boundary
        trace_writer.compress = timed_compress

    def timings(self) -> dict:
        from rlprof_torch import nogil

        return {"tokens": list(self.tokens), "boundaries": list(self.boundaries), "exports": list(self.exports),
                "path": "nogil" if nogil.unavailable() is None else f"torch ({nogil.unavailable()})"}


def run_replica(path: str, versions: int, version_s: float, save_path: str, every: int = EVERY) -> dict:
    import ray
    import torch

    from rlprof.config.schema import load_config
    from rlprof.demo.async_trainer import ASYNC_SIZES
    from rlprof.demo.grpo import TinyPolicy
    from rlprof.demo.samples import SampleQueue, StalenessLimit

    profiled = list(range(2, versions - 1, every))
    config = load_config({"global_profiler": {"tool": ["torch"], "steps": profiled, "save_path": save_path},
                          "actor_rollout_ref": {"rollout": {"profiler": {
                              "enable": True, "all_ranks": True, "tool_config": {"torch": {"contents": ["cpu"]}}}}}})
    big = 10 ** 9  # the limit never holds the replica: it generates without pause
    limit = StalenessLimit(batch=big, staleness=big, capacity=big, last_step=versions)
    queue = ray.remote(SampleQueue).options(num_cpus=0).remote(limit, 1)
    env = {"RLPROF_TORCH_NOGIL": "0" if path == "torch" else "auto"}
    replica = ray.remote(TimedReplica).options(num_cpus=0, runtime_env={"env_vars": env}).remote(
        config, 0, 1, f"bench-{path}", ASYNC_SIZES, queue, versions)
    ray.get(replica.ready.remote())
    weights = ray.put(TinyPolicy(ASYNC_SIZES).state_dict())
    ray.get(replica.start.remote())
    starts = [time.time_ns()]
    for version in range(1, versions + 1):
        time.sleep(version_s)
        ray.get(replica.sync.remote(version, [weights]))
        starts.append(time.time_ns())
    artifacts = ray.get(replica.close.remote())
    got = ray.get(replica.timings.remote())
    ray.kill(replica)
    ray.kill(queue)
    got["artifacts"] = artifacts
    got["profiled"] = profiled
    return got


def tokens_in(tokens: list[tuple[int, int]], a: int, b: int) -> float:
    """Tokens generated in [a, b] (ns), from the ``(time_ns, tokens so far)`` record."""
    before = [n for t, n in tokens if t <= a]
    upto = [n for t, n in tokens if t <= b]
    return (upto[-1] if upto else 0) - (before[-1] if before else 0)


def rate(tokens, a: int, b: int) -> float:
    return tokens_in(tokens, a, b) / max((b - a) / 1e9, 1e-9)


def outside(start: int, end: int, busy: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start, end] less the ``busy`` intervals, in pieces of at least :data:`PIECE_S`."""
    pieces, at = [], start
    for a, b in sorted(busy):
        if a > at:
            pieces.append((at, min(a, end)))
        at = max(at, b)
    pieces.append((at, end))
    return [(a, b) for a, b in pieces if b - a >= PIECE_S * 1e9]


def analyse(got: dict, versions: int) -> dict:
    tokens, boundaries, exports = got["tokens"], got["boundaries"], got["exports"]
    # boundaries[i] ends version i + 1 (the replica's last boundary, at its end, is the run's close)
    profiled = got["profiled"]
    busy = [(boundaries[v - 2][1], c1) for (_, c1), v in zip(exports, profiled)]  # capture start to export end
    clean = outside(boundaries[0][1], boundaries[versions - 1][0], busy)
    baseline = [rate(tokens, a, b) for a, b in clean]
    base = statistics.median(baseline)
    rows = {"stop": [], "export": [], "end": [], "capture": []}
    durations = {"stop": [], "export": [], "end": []}
    for export, v in zip(exports, profiled):
        s0, s1 = boundaries[v - 1]
        c0, c1 = export
        rows["stop"].append(rate(tokens, s0, s1) / base)
        rows["export"].append(rate(tokens, c0, c1) / base)
        rows["end"].append(rate(tokens, s0, c1) / base)
        rows["capture"].append(rate(tokens, boundaries[v - 2][1], s0) / base)
        durations["stop"].append((s1 - s0) / 1e6)
        durations["export"].append((c1 - c0) / 1e6)
        durations["end"].append((c1 - s0) / 1e6)
    sizes = [r.get("size", 0) for r in got["artifacts"] if r.get("state") == "written"]
    return {"base": base, "baseline": baseline, "outside_s": sum(b - a for a, b in clean) / 1e9, "rows": rows, "durations": durations, "captures": len(exports),
            "trace_mb": statistics.median(sizes) / 1e6 if sizes else 0.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--versions", type=int, default=26, help="weight syncs")
    p.add_argument("--every", type=int, default=EVERY, help="every how many versions one is profiled, from version 2")
    p.add_argument("--dump", help="also write the raw timings (JSON) here, for --load")
    p.add_argument("--load", help="print from raw timings written by --dump instead of running")
    p.add_argument("--version-s", type=float, default=1.5, help="seconds between weight syncs")
    p.add_argument("--paths", default="nogil,torch", help="nogil (this tree's), torch (RLPROF_TORCH_NOGIL=0)")
    a = p.parse_args(argv)
    import ray

    from rlprof.demo.trainer import start_ray

    raw = {}
    if a.load:
        raw = json.loads(Path(a.load).read_text())
    else:
        start_ray(num_cpus=2)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                for path in [s.strip() for s in a.paths.split(",") if s.strip()]:
                    raw[path] = run_replica(path, a.versions, a.version_s, str(Path(tmp) / path), a.every)
        finally:
            ray.shutdown()
        if a.dump:
            Path(a.dump).write_text(json.dumps(raw))
    results = {path: (got["path"], analyse(got, a.versions)) for path, got in raw.items()}
    print(f"rlprof demo --async's replica (tiny policy, torch backend, contents cpu), {a.versions} versions of "
          f"{a.version_s:g} s, every {a.every}th profiled from 2; generation rate as a share of its median rate outside "
          f"captures (pieces >= {PIECE_S:g} s of no capture and no capture's end); medians over the captures (min-max)")
    print(f"{'path':>6} {'captures':>8} {'trace MB':>8} {'outside tok/s':>13} {'outside s':>9} "
          + " ".join(f"{w + ' ms':>10} {w + ' rate':>17}" for w in ("stop", "export", "end")) + f" {'in capture':>17}")
    for path, (taken, r) in results.items():
        cells = []
        for w in ("stop", "export", "end"):
            shares = r["rows"][w]
            spread = f"{statistics.median(shares):.0%} ({min(shares):.0%}-{max(shares):.0%})"
            cells.append(f"{statistics.median(r['durations'][w]):>10.0f} {spread:>17}")
        shares = r["rows"]["capture"]
        print(f"{path:>6} {r['captures']:>8} {r['trace_mb']:>8.1f} {r['base']:>13.0f} {r['outside_s']:>9.1f} " + " ".join(cells)
              + f" {statistics.median(shares):>17.0%}" + (f"   [{taken}]" if taken != path else ""))
    print("stop: the step_boundary closing the capture, on the generating thread (Kineto stops on the thread "
          "that started it); export: the background writer (export, free, gzip, sha256, place); end: stop start "
          "to export end. Target: end >= 70%.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
