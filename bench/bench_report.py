"""Does ``rlprof report`` cost the same for 1 MB as for 1 GB of traces? Time and peak memory, side by side.

Generates two runs with identical manifests (:mod:`rlprof.testing.generated_run`: 64 ranks on 8
hosts, 4 profiled end-to-end steps, a GRPO-shaped step with a nested region) — one with 1 MiB of
trace files in all, one with 1 GiB (real bytes written to disk unless ``--sparse``) — in a temporary
directory that is removed afterwards. Then runs each command as a fresh process (``python -m
rlprof.cli ...``, what a user types) on both runs, alternating, ``--repeats`` times, and prints per
command the median wall time and the median peak RSS of the process (``wait4``'s ``ru_maxrss``), and
the ratio 1 GiB / 1 MiB. The report reads manifests only, so the ratio should be ~1.0. Usage::

    python bench/bench_report.py [--ranks 64] [--steps 4] [--gib 1] [--repeats 5] [--sparse]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlprof.analysis.report import build_reports, render
from rlprof.testing.generated_run import generate_run

COMMANDS = {
    "report (text)": ["report", "{run}"],
    "report --json": ["report", "{run}", "--json"],
    "report --html": ["report", "{run}", "--html", "-o", "{tmp}/report-{n}.html"],
    "timeline": ["timeline", "{run}", "-o", "{tmp}/timeline-{n}.json"],
}


def run_once(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one ``python -m rlprof.cli ...`` process."""
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "rlprof.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - began
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024.0  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--gib", type=float, default=1.0, help="trace bytes of the large run, in GiB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sparse", action="store_true", help="sparse trace files (holes) instead of written bytes")
    opts = parser.parse_args()
    steps = tuple(range(1, opts.steps + 1))
    tmp = Path(tempfile.mkdtemp(prefix="rlprof-bench-report-"))
    try:
        sizes = {"1 MiB": 1 << 20, f"{opts.gib:g} GiB": int(opts.gib * (1 << 30))}
        runs = {}
        for label, size in sizes.items():
            began = time.perf_counter()
            runs[label] = generate_run(tmp / label.replace(" ", ""), ranks=opts.ranks, steps=steps, trace_bytes=size,
                                       sparse=opts.sparse, slow={(opts.ranks - 1, "actor_update"): 1.5})
            on_disk = sum(p.stat().st_blocks * 512 for p in runs[label].rglob("*") if p.is_file())
            manifests = sum(p.stat().st_size for p in (runs[label] / "manifest").iterdir())
            files = sum(1 for p in runs[label].rglob("*.pt.trace.json.gz"))
            print(f"generated {label}: {opts.ranks} ranks x {len(steps)} steps, {files} trace files, "
                  f"{on_disk / (1 << 20):.1f} MiB on disk, manifests {manifests / (1 << 20):.2f} MiB, "
                  f"in {time.perf_counter() - began:.1f} s", flush=True)
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        n = 0
        for _ in range(opts.repeats):
            for name, template in COMMANDS.items():
                for label, run_dir in runs.items():  # alternate sizes so drift hits both alike
                    n += 1
                    argv = [a.format(run=run_dir, tmp=tmp, n=n) for a in template]
                    results.setdefault((name, label), []).append(run_once(argv))
        small, large = list(sizes)
        print(f"\nmedians of {opts.repeats} runs each, one fresh process per run (python -m rlprof.cli ...):")
        header = f"{'command':<16} {small + ' s':>10} {large + ' s':>10} {'ratio':>6}   {small + ' MiB':>12} {large + ' MiB':>12} {'ratio':>6}"
        print(header)
        for name in COMMANDS:
            ts = [statistics.median(t for t, _ in results[name, label]) for label in (small, large)]
            ms = [statistics.median(m for _, m in results[name, label]) for label in (small, large)]
            print(f"{name:<16} {ts[0]:>10.3f} {ts[1]:>10.3f} {ts[1] / ts[0]:>6.2f}   {ms[0]:>12.1f} {ms[1]:>12.1f} {ms[1] / ms[0]:>6.2f}")
        inner: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(opts.repeats * 4):
            for label, run_dir in runs.items():
                began = time.perf_counter()
                [report] = build_reports([run_dir])
                render(report)
                inner[label].append(time.perf_counter() - began)
        t_small, t_large = (statistics.median(inner[label]) for label in (small, large))
        print(f"{'in-process':<16} {t_small:>10.3f} {t_large:>10.3f} {t_large / t_small:>6.2f}   "
              f"(build_reports + render, median of {opts.repeats * 4}, no interpreter start)")
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        print(f"\n(for scale: a bare `python -c pass` takes {time.perf_counter() - began:.3f} s here)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
