"""The per-rank breakdown against Holistic Trace Analysis, side by side in one run on the same traces.

1. Writes ``--ranks`` hand-made multi-rank GPU Kineto traces of about ``--mb`` MB each
   (plugins/torch/tests/kineto_synthetic.py: compute, NCCL and copies, whole-µs times) into a
   temporary directory.
2. Runs each side as a fresh process, alternating, ``--repeats`` times: HTA 0.5.0
   (``TraceAnalysis(trace_dir)`` + ``get_temporal_breakdown`` + ``get_comm_comp_overlap``) and
   ``rlprof breakdown`` (``breakdown_files.breakdown`` with 2 workers). Each reports its time to the
   per-rank breakdown and its peak RSS: the process's own ``ru_maxrss`` plus the largest of its worker
   processes' (both sides parse ranks in worker processes), so "peak" is what one side holds at most.
   Prints medians and ours/HTA (targets: time <= 0.5x, peak RSS <= 0.5x).
3. Throughput: one trace read by one process (``--workers 1``), MB of JSON per CPU second.
4. With ``--big-gib`` (default 1; 0 skips): a single trace of that size in /tmp, read by one process:
   its peak RSS (target: under 1 GiB for 1 GiB) and MB/s. The file is removed afterwards.

Run: ``.venv/bin/python bench/bench_breakdown.py [--ranks 2] [--mb 40] [--repeats 3] [--big-gib 1]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SYNTHETIC = HERE.parent / "plugins" / "torch" / "tests"


def side(kind: str, directory: str, workers: int) -> None:
    """Run in a child process: one side's breakdown of every trace in ``directory``; print what it cost."""
    started = time.perf_counter()
    cpu = time.process_time()
    if kind == "hta":
        import logging

        logging.disable(logging.WARNING)
        from hta.trace_analysis import TraceAnalysis

        analysis = TraceAnalysis(trace_dir=directory)
        analysis.get_temporal_breakdown(visualize=False)
        analysis.get_comm_comp_overlap(visualize=False)
    else:
        from rlprof.analysis.breakdown_files import breakdown, trace_files

        rows, errors = breakdown(trace_files([directory]), workers=workers)
        assert rows and not errors, errors
    seconds = time.perf_counter() - started
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"seconds": seconds, "self_kib": own.ru_maxrss, "children_kib": children.ru_maxrss,
                      "cpu_seconds": time.process_time() - cpu + children.ru_utime + children.ru_stime}))


def measure(kind: str, directory: Path, workers: int = 2) -> dict:
    output = subprocess.run([sys.executable, __file__, "--side", kind, "--dir", str(directory), "--workers", str(workers)],
                            check=True, capture_output=True, text=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    result["peak_mib"] = (result["self_kib"] + result["children_kib"]) / 1024
    return result


def fresh(directory: Path) -> None:
    """Remove rlprof's caches, so every repeat reads the traces."""
    for cache in directory.glob("*.rlprof-breakdown.json"):
        cache.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mb", type=float, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--big-gib", type=float, default=1.0)
    parser.add_argument("--side", choices=("hta", "ours"))
    parser.add_argument("--dir")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if args.side:
        side(args.side, args.dir, args.workers)
        return
    sys.path.insert(0, str(SYNTHETIC))
    from kineto_synthetic import write_big_trace, write_traces

    with tempfile.TemporaryDirectory(prefix="bench-breakdown-") as temporary:
        directory = Path(temporary) / "traces"
        steps = max(2, int(args.mb * 1e6 / (200 * 3 * 190)))  # ~190 bytes an event, 3 events a launch, 200 launches a step
        paths = write_traces(directory, world=args.ranks, steps=steps, kernels_per_step=200)
        total_mb = sum(p.stat().st_size for p in paths) / 1e6
        print(f"{args.ranks} ranks, {total_mb:.0f} MB of Kineto JSON in all ({steps} steps each)")
        results: dict[str, list[dict]] = {"hta": [], "ours": []}
        for _ in range(args.repeats):
            for kind in ("hta", "ours"):
                fresh(directory)
                results[kind].append(measure(kind, directory))
        fresh(directory)
        medians = {kind: {key: statistics.median(r[key] for r in runs) for key in ("seconds", "peak_mib")}
                   for kind, runs in results.items()}
        for kind in ("hta", "ours"):
            print(f"  {kind:5s} time to per-rank breakdown {medians[kind]['seconds']:7.2f} s   "
                  f"peak RSS {medians[kind]['peak_mib']:7.0f} MiB")
        print(f"  ours / HTA: time {medians['ours']['seconds'] / medians['hta']['seconds']:.2f}x (target <= 0.5), "
              f"peak RSS {medians['ours']['peak_mib'] / medians['hta']['peak_mib']:.2f}x (target <= 0.5)")
        single = directory / "single"
        single.mkdir()
        os.link(paths[0], single / paths[0].name)
        one = measure("ours", single, workers=1)
        print(f"  one trace, one process: {paths[0].stat().st_size / 1e6 / one['cpu_seconds']:.1f} MB/s per core")
    if args.big_gib > 0:
        with tempfile.TemporaryDirectory(prefix="bench-breakdown-big-", dir="/tmp") as temporary:
            big = write_big_trace(Path(temporary) / "big.json", int(args.big_gib * 2**30))
            size = big.stat().st_size
            result = measure("ours", Path(temporary), workers=1)
            print(f"{size / 2**30:.2f} GiB trace, one process: peak RSS {result['peak_mib']:.0f} MiB "
                  f"(target < {size / 2**20:.0f} MiB), {size / 1e6 / result['cpu_seconds']:.1f} MB/s per core, "
                  f"{result['seconds']:.1f} s")


if __name__ == "__main__":
    main()
