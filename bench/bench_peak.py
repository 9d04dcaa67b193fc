"""``rlprof peak`` against a plain torch.matmul loop, side by side in one run (issue 49: within 20% on CPU fp32).

Each round runs the calibration (:func:`rlprof.peak.calibrate`, what ``rlprof peak`` and a run measure: square
fp32 products of 1024, the best of several rounds after a warm-up) and then a plain loop of ``torch.matmul`` on
its own 1024 x 1024 matrices for as long, its throughput the best of 50 ms windows; the ratio of the two per
pair (a pair sees the same load), and the median over the pairs.

Run: ``flock /tmp/rlprof-cpu.lock python bench/bench_peak.py [--pairs 7] [--seconds 0.4]``; beside two busy
processes: ``python -c 'while True: pass' &`` twice first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlprof.peak import calibrate


def plain_loop(seconds: float, n: int = 1024) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < 0.05:
            torch.matmul(a, b)
            count += 1
        best = max(best, 2 * n ** 3 * count / (time.perf_counter() - start))
    return best / 1e12


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.4)
    opts = parser.parse_args()
    ours, plain = [], []
    for _ in range(opts.pairs):
        ours.append(calibrate("cpu", "fp32", opts.seconds))
        plain.append(plain_loop(opts.seconds))
    ratios = [o / p for o, p in zip(ours, plain)]
    print(f"rlprof peak (cpu, fp32): median {statistics.median(ours) * 1e3:.1f} GFLOP/s  "
          f"[{', '.join(f'{v * 1e3:.1f}' for v in ours)}]")
    print(f"plain torch.matmul loop: median {statistics.median(plain) * 1e3:.1f} GFLOP/s  "
          f"[{', '.join(f'{v * 1e3:.1f}' for v in plain)}]")
    print(f"ratio per pair: median {statistics.median(ratios):.3f}  [{', '.join(f'{r:.2f}' for r in ratios)}]  "
          f"(target: within 0.8-1.2)")


if __name__ == "__main__":
    main()
