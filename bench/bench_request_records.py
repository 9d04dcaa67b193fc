"""What a rollout request record costs the replica, and how many bytes it takes (issue 48).

Side by side in one run:

1. **Per record, on the replica** (target: at most 5 us). A generate call's outputs, as vLLM 0.32 returns
   them (the real ``RequestOutput``/``CompletionOutput``/``RequestStateStats``, log stats on), handed to a
   replica's :meth:`EngineReplica.served`: the vLLM adapter's ``requests`` (vLLM's stats onto the run's clock),
   the clock check, the replica and step set, and :meth:`rlprof.Profiler.record_requests` (one list extend).
   The flusher thread and the driver are not on this path. Per record = (served(outputs) - nothing) / n;
   medians of interleaved repeats, for batches of 16 and 1024 requests.
2. **Bytes per request** in the run's file (``rollout_requests.jsonl.gz``: one gzip member a step) for steps
   of 16, 256 and 10,000 requests with realistic times (microseconds apart, varied lengths).

Run: ``flock /tmp/rlprof-cpu.lock .venv/bin/python bench/bench_request_records.py`` (imports vLLM: ~10 s).
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path

REPEATS = 21


def outputs(n: int, mono0: float, wall0: float) -> list:
    from vllm.outputs import CompletionOutput, RequestOutput
    from vllm.v1.metrics.stats import RequestStateStats

    rng = random.Random(n)
    out = []
    for i in range(n):
        tokens = rng.randint(1, 512)
        scheduled = mono0 + rng.random() * 0.01
        stats = RequestStateStats(num_generation_tokens=tokens, num_preemptions=0, arrival_time=wall0 + i * 1e-6,
                                  queued_ts=mono0 + i * 1e-6, scheduled_ts=scheduled, first_token_ts=scheduled + 0.02,
                                  last_token_ts=scheduled + 0.02 + tokens * 0.01)
        completion = CompletionOutput(index=0, text="", token_ids=list(range(tokens)), cumulative_logprob=None,
                                      logprobs=None, finish_reason="length")
        out.append(RequestOutput(str(i), None, [1, 2, 3, 4], None, [completion], True, metrics=stats))
    return out


def per_record(n: int, save: str) -> dict[str, float]:
    from rlprof.integrations.engines.replica import EngineReplica

    config = {"global_profiler": {"tool": "torch", "steps": [], "save_path": save},
              "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {"enable": True, "all_ranks": True}}}}
    replica = EngineReplica(config, replica_rank=0, num_replicas=1)
    batch = outputs(n, time.monotonic(), time.time())
    times = replica.profiler.timings
    replica.start(object(), 1)
    served, empty = [], []
    for _ in range(REPEATS):
        began = time.perf_counter_ns()
        replica.served(batch)
        served.append((time.perf_counter_ns() - began) / n / 1e3)
        began = time.perf_counter_ns()
        replica.served([])
        empty.append((time.perf_counter_ns() - began) / n / 1e3)
        times.requests.clear()  # the flusher would take them; keep the list as short as it finds it
    replica.stop(object())
    replica.finalize()
    return {"served_us": statistics.median(served), "call_us": statistics.median(empty)}


def bytes_per_request(n: int, steps: int, root: Path) -> float:
    from rlprof.request_records import RecordFile, RequestRecord

    rng = random.Random(7)
    path = root / f"r{n}" / "rollout_requests.jsonl.gz"
    store = RecordFile(path, path.parent)
    t0 = time.time_ns()
    for step in range(steps):
        origin = t0 + step * 10**10
        records = []
        for i in range(n):
            arrival = origin + rng.randint(0, 5_000_000)
            scheduled = arrival + rng.randint(0, 2_000_000_000)
            tokens = rng.randint(1, 2048)
            records.append(RequestRecord(f"{step}-{i}-{rng.getrandbits(32):08x}", i % 8, step, arrival, arrival + 50_000,
                                         scheduled, scheduled + 30_000_000, scheduled + 30_000_000 + tokens * 9_000_000,
                                         rng.randint(64, 1024), tokens, "length" if rng.random() < 0.3 else "stop", 0))
        store.write(step, origin, records)
    store.close()
    return path.stat().st_size / (n * steps)


def main() -> None:
    with tempfile.TemporaryDirectory() as save:
        import vllm.outputs  # noqa: F401  (imported before timing)

        for n in (16, 1024):
            got = per_record(n, save)
            print(f"per record, batches of {n:5d}: served {got['served_us']:.2f} us/record "
                  f"(the call itself {got['call_us'] * n:.1f} us per batch); target <= 5 us")
        for n, steps in ((16, 50), (256, 20), (10_000, 3)):
            print(f"bytes per request, steps of {n:6d} requests: {bytes_per_request(n, steps, Path(save)):.1f} B")


if __name__ == "__main__":
    main()
