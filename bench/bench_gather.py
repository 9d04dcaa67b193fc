"""The controller's memory while ``global_profiler.gather: traces`` streams 1 GiB of traces from another node.

A simulated cluster of two Ray nodes (``rlprof.integrations.nodes.simulated_cluster``): the controller
(this process) on node 0, one worker pinned on node 1 with its own save path. The worker's backend
writes ``--files`` trace files of ``--size-mb`` MiB each at finalize (incompressible bytes); the
controller then gathers them through Ray in 96 KiB chunks (``rlprof.integrations.gather.CHUNK_BYTES``). A thread samples this process's resident
memory (``/proc/self/status``: VmRSS, and its anonymous part RssAnon) every 5 ms; the controller's
peak during gathering is printed beside its memory before, with the time and throughput.
Every file's SHA-256 is verified by the controller (the run fails otherwise). Usage::

    python bench/bench_gather.py [--size-mb 1024] [--files 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
import time
from pathlib import Path

import ray

from rlprof import hookimpl
from rlprof.integrations.gather import CHUNK_BYTES, IN_FLIGHT
from rlprof.integrations.nodes import pinned, simulated_cluster
from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.testing.ray_worker import ScriptedWorker


class BlobBackend:
    """Writes the benchmark's trace files at finalize (1 MiB of random bytes repeated with a counter,
    so no two MiB are equal and nothing compresses or deduplicates)."""

    def __init__(self, files: int, size_mb: int):
        self.files, self.size_mb = files, size_mb

    @hookimpl
    def finalize(self, ctx):
        block = os.urandom(1 << 20)
        paths = []
        for i in range(self.files):
            path = ctx.output_dir() / f"blob{i}.pt.trace.json.gz"
            with open(path, "wb") as out:
                for mb in range(self.size_mb):
                    out.write(mb.to_bytes(8, "little") + block[8:])
            paths.append(path)
        return paths


def status() -> dict[str, int]:
    """This process's memory in KiB, from ``/proc/self/status``."""
    out = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0])
    return out


class Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.peak: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for key, value in status().items():
                self.peak[key] = max(self.peak.get(key, 0), value)
            time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--files", type=int, default=1)
    opts = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cluster = simulated_cluster([tmp / "node0", tmp / "node1"])
        try:
            config = {"global_profiler": {"tool": "blob", "steps": [1], "save_path": str(tmp / "controller"),
                                          "gather": "traces", "gather_delete_local": True},
                      "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
            controller = ProfilingController(config, timeout_s=600)
            handle = ray.remote(ScriptedWorker).options(num_cpus=0, **pinned(cluster.node_ids[1])).remote(HYBRID_ENGINE_STAGES)
            controller.add(WorkerSpec(rank=0, world_size=1, roles=("actor", "rollout", "ref"), stages=HYBRID_ENGINE_STAGES), handle)
            assert controller.setup(backends={"blob": BlobBackend(opts.files, opts.size_mb)}).ok
            controller.start_step(1)
            ray.get(handle.run_step.remote(), timeout=60)
            controller.step_boundary()
            before = status()
            sampler = Sampler()
            sampler.start()
            began = time.perf_counter()
            final = controller.finalize()  # the worker writes its files, then the controller gathers them
            seconds = time.perf_counter() - began
            sampler.stop.set()
            sampler.join()
            gathered = controller.gathered
            assert final.ok and gathered.files == opts.files and not gathered.failed, gathered
            moved = sum(p.stat().st_size for p in (tmp / "controller").rglob("blob*.json.gz"))
            assert moved == opts.files * opts.size_mb << 20
        finally:
            ray.shutdown()
            cluster.shutdown()
    total_mib = opts.files * opts.size_mb
    print(f"gather: traces, {opts.files} file(s), {total_mib} MiB from node 1 to the controller ({CHUNK_BYTES >> 10} KiB "
          f"chunks, {IN_FLIGHT} in flight, SHA-256 verified, node copy deleted)")
    print(f"{'controller memory (MiB)':<28} {'before':>8} {'peak while gathering':>21} {'peak - before':>14}")
    for key in ("VmRSS", "RssAnon", "RssShmem"):
        b, p = before.get(key, 0) / 1024, sampler.peak.get(key, 0) / 1024
        print(f"{key:<28} {b:>8.1f} {p:>21.1f} {p - b:>14.1f}")
    print(f"finalize + gather: {seconds:.1f} s (gathering alone {gathered.seconds:.1f} s, "
          f"{total_mib / max(gathered.seconds, 1e-9):.0f} MiB/s); files verified: {gathered.files}, "
          f"node copies deleted: {gathered.deleted_local}")


if __name__ == "__main__":
    main()
