"""10,000 rollout requests a step over 100 steps: what the driver spends on them, what they take on disk, and how long
``rlprof report`` takes (issue 48: at most 10 s, the bytes per request printed).

A run is generated (:mod:`rlprof.testing.generated_run`: 2 trainer ranks, 8 rollout replicas, 2 profiled steps) and
its driver's side replayed with the real :class:`~rlprof.runtime.step_book.StepBook`: 100 step windows, each step's
10,000 records (8 replicas, lengths 1-2048 tokens, one replica with a long tail) handed in as the replicas' batches
would bring them, the book pumped after each step (the figures, the step metrics line, the records file), as the
driver's collector thread does. Printed: the book's time per step (its thread, never the training's), the file's
size and bytes per request, then each command as a fresh process (``python -m rlprof.cli ...``, what a user types):
``report`` (text), ``report --json``, ``report --html``, wall time each, against the 10 s target.

Run: ``flock /tmp/rlprof-cpu.lock .venv/bin/python bench/bench_request_report.py [--steps 100] [--requests 10000]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlprof.request_records import FILE as RECORDS_FILE, RequestRecord
from rlprof.runtime.step_book import StepBook
from rlprof.runtime.step_timings import Batch
from rlprof.step_metrics import FILE
from rlprof.testing.generated_run import START_NS, generate_run

REPLICAS = 8
MS = 1_000_000


def step_records(step: int, start: int, n: int, rng: random.Random) -> list[RequestRecord]:
    out = []
    for i in range(n):
        replica = i % REPLICAS
        arrival = start + rng.randint(0, 20 * MS)
        scheduled = arrival + rng.randint(0, 300 * MS)
        tokens = 2048 if (replica == 3 and i < REPLICAS) else rng.randint(1, 512)
        first = scheduled + rng.randint(20, 60) * MS
        out.append(RequestRecord(f"req-{step}-{i}-{rng.getrandbits(24):06x}", replica, step, arrival, arrival + 100_000,
                                 scheduled, first, first + tokens * 4 * MS, rng.randint(64, 1024), tokens,
                                 "length" if tokens in (512, 2048) else "stop", 0))
    return out


def replay(run_dir: Path, steps: int, n: int) -> list[float]:
    """The driver's book over ``steps`` steps of ``n`` requests; its seconds per step."""
    rng = random.Random(48)
    book = StepBook(run_dir / FILE, run_dir.name, None, root=run_dir)
    spent = []
    for step in range(1, steps + 1):
        start = START_NS + step * 60 * 10**9
        records = step_records(step, start, n, rng)
        began = time.perf_counter()
        book.began(step, start)
        book.ended(step, start + 20 * 10**9)
        book.receive(Batch(run_dir.name, "replicas", 0, [("rollout", "rollout_generate", start, start + 19 * 10**9)], [],
                           start + 30 * 10**9, requests=records))
        book.pump()
        spent.append(time.perf_counter() - began)
    book.close()
    return spent


def timed(argv: list[str]) -> float:
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlprof.cli", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"rlprof {' '.join(argv)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = generate_run(Path(tmp) / "save", ranks=2, steps=(1, 2), replicas=REPLICAS)
        spent = replay(run_dir, opts.steps, opts.requests)
        size = (run_dir / RECORDS_FILE).stat().st_size
        total = opts.steps * opts.requests
        print(f"{opts.requests} requests a step x {opts.steps} steps ({total} records): the driver's book "
              f"{statistics.median(spent) * 1e3:.0f} ms a step (median; figures, line, records), on its own thread")
        print(f"records file {size / 1e6:.1f} MB: {size / total:.1f} bytes per request")
        for label, argv in (("report (text)", ["report", str(run_dir)]), ("report --json", ["report", str(run_dir), "--json"]),
                            ("report --html", ["report", str(run_dir), "--html", "-o", f"{tmp}/r.html", "--force"])):
            times = [timed(argv) for _ in range(opts.repeats)]
            print(f"{label:14s} {statistics.median(times):5.2f} s (median of {opts.repeats}; target <= 10 s)")


if __name__ == "__main__":
    main()
