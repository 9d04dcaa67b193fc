"""Multi-rank GPU Kineto traces written by hand, for the breakdown's HTA check and bench/bench_breakdown.py.

No GPU here, and no public multi-rank trace was at hand, so these follow the schema torch.profiler
writes on CUDA and HTA 0.5.0 reads: per rank a header with ``distributedInfo.rank``, then
``ProfilerStep#N`` annotations, ``aten::*`` cpu_ops launching ``cudaLaunchKernel`` / ``cudaMemcpyAsync``
runtime calls, and ``kernel`` / ``gpu_memcpy`` events matched to them by ``args.correlation``:
compute kernels on stream 7, NCCL all-reduce kernels on stream 20 (overlapping compute), copies on
stream 7 and on a copy stream 9. Kernel names are classed alike by HTA and rlprof (``ncclDevKernel_*``
communication, ``Memcpy``/``Memset`` memory, the rest compute), and times are whole microseconds
(HTA reads ``ts`` and ``dur`` as integers). Rank ``r`` launches its collectives
``r * lag_us`` late, so the other ranks' NCCL kernels wait for it.

Events are written one at a time, so a trace of several GB costs no memory to write.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import IO


def write_trace(path: Path, rank: int, *, steps: int = 4, kernels_per_step: int = 60, world: int = 2,
                lag_us: float = 40.0, seed: int = 0) -> Path:
    """Write one rank's trace to ``path`` (``.json``); returns ``path``."""
    with open(path, "w", encoding="utf-8") as out:
        _Writer(out, rank, world, random.Random(seed * 1000 + rank), lag_us).trace(steps, kernels_per_step)
    return path


def write_traces(directory: Path, world: int = 2, **options) -> list[Path]:
    """One trace per rank in ``directory`` (the layout HTA's ``TraceAnalysis(trace_dir=...)`` reads)."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_trace(directory / f"rank{rank}.json", rank, world=world, **options) for rank in range(world)]


def write_big_trace(path: Path, target_bytes: int, rank: int = 0) -> Path:
    """A single-rank trace of about ``target_bytes`` (for memory and throughput)."""
    with open(path, "w", encoding="utf-8") as out:
        writer = _Writer(out, rank, 1, random.Random(rank), 0.0)
        writer.trace(steps=10**9, kernels_per_step=200, until_bytes=target_bytes)
    return path


class _Writer:
    def __init__(self, out: IO[str], rank: int, world: int, rng: random.Random, lag_us: float):
        self.out, self.rank, self.world, self.rng, self.lag_us = out, rank, world, rng, lag_us
        self.correlation = 0
        self.first = True
        self.written = 0

    def event(self, **fields) -> None:
        fields["ts"], fields["dur"] = round(fields["ts"]), max(1, round(fields["dur"]))  # whole µs, as HTA keeps them
        text = ("" if self.first else ",\n") + json.dumps(fields, separators=(",", ":"))
        self.first = False
        self.out.write(text)
        self.written += len(text)

    def trace(self, steps: int, kernels_per_step: int, until_bytes: int | None = None) -> None:
        header = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
                  "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world},
                  "baseTimeNanoseconds": 1_700_000_000_000_000_000}
        self.out.write(json.dumps(header)[:-1] + ', "traceEvents": [\n')
        host, streams = 1000.0, {7: 0.0, 9: 0.0, 20: 0.0}
        step = 0
        while step < steps and (until_bytes is None or self.written < until_bytes):
            step_start = host
            ops = []
            for index in range(kernels_per_step):
                host += self.rng.uniform(5, 30)
                if index % 10 == 9:
                    host += self.rank * self.lag_us
                    kind = "nccl"
                elif index % 7 == 3:
                    kind = "copy" if index % 2 else "copy_stream"
                else:
                    kind = "compute"
                ops.append(self.launch(host, kind, streams))
                host += 8
            host += self.rng.uniform(10, 50)
            self.event(ph="X", cat="user_annotation", name=f"ProfilerStep#{step + 1}", pid=1, tid=1, ts=step_start,
                       dur=host - step_start, args={"External id": 0})
            step += 1
            host = max(host, max(streams.values())) + 20
        self.out.write("\n]}\n")

    def launch(self, host: float, kind: str, streams: dict[int, float]) -> None:
        self.correlation += 1
        correlation = self.correlation
        name, stream, runtime, duration = {
            "compute": ("sm90_xmma_gemm_bf16", 7, "cudaLaunchKernel", self.rng.uniform(20, 200)),
            "nccl": ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 20, "cudaLaunchKernel", self.rng.uniform(50, 300)),
            "copy": ("Memcpy DtoD (Device -> Device)", 7, "cudaMemcpyAsync", self.rng.uniform(5, 40)),
            "copy_stream": ("Memcpy HtoD (Pinned -> Device)", 9, "cudaMemcpyAsync", self.rng.uniform(5, 40)),
        }[kind]
        category = "gpu_memcpy" if kind.startswith("copy") else "kernel"
        op = "record_param_comms" if kind == "nccl" else ("aten::copy_" if category == "gpu_memcpy" else "aten::mm")
        self.event(ph="X", cat="cpu_op", name=op, pid=1, tid=1, ts=host - 1, dur=7, args={"External id": correlation})
        self.event(ph="X", cat="cuda_runtime", name=runtime, pid=1, tid=1, ts=host, dur=5,
                   args={"correlation": correlation, "External id": correlation})
        start = max(host + 6, streams[stream]) + self.rng.uniform(0, 3)
        streams[stream] = start + duration
        self.event(ph="X", cat=category, name=name, pid=0, tid=stream, ts=start, dur=duration,
                   args={"correlation": correlation, "External id": correlation, "stream": stream, "device": 0})
