"""Many nodes on paper: what reaching the controller costs per profiled step for 64 ranks on 8 nodes and
512 ranks on 64 nodes, and what the report then costs on the controller.

No cluster of that size fits here, so the ranks' manifests are generated
(:mod:`rlprof.testing.generated_run`: a GRPO-shaped step of 5 regions, end-to-end, one trace per rank
and step, 4 profiled steps) and replayed as the workers would send them: each rank's manifest is cut
into one :class:`~rlprof.integrations.nodes.ManifestBatch` per profiled step (what
``ProfiledWorker.rlprof_step_boundary(send_manifest=True)`` returns; the first also carries the
``process`` record, the last the ``finalized`` one), each batch is pickled as Ray pickles a reply
(its size is what crosses the network), unpickled, and handed to the controller's real
:class:`~rlprof.integrations.nodes.RunCollector`, which writes the controller's run directory.
Printed per size: bytes moved per step (all ranks, and per rank), the controller's time to take one
step's batches, its peak Python memory doing so (``tracemalloc``), and ``rlprof report``'s build
time and peak memory on the controller's directory beside the same on the nodes' own directories
(the old way: every node's save path, copied by hand). The Ray round trip itself is the fan-out the
controller already makes each profiled step (bench/bench_ray_fanout.py); the batch rides on its reply. Usage::

    python bench/bench_nodes.py [--sizes 64x8,512x64] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import time
import tracemalloc
from pathlib import Path

from rlprof.analysis.report import build_reports
from rlprof.integrations.nodes import ManifestBatch, RunCollector
from rlprof.testing.generated_run import generate_run

RUN = "20261122-050000-a1b2c3"


def batches_of(manifest: Path, node: str, run_dir: Path) -> list[ManifestBatch]:
    """The manifest cut as a worker sends it: one batch per profiled step (cut before each ``step``
    record after the first; what precedes the first step rides with it, what follows the last with it)."""
    lines = manifest.read_bytes().splitlines(keepends=True)
    cuts = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "step"][1:]
    pieces, start = [], 0
    for cut in cuts + [len(lines)]:
        pieces.append(b"".join(lines[start:cut]))
        start = cut
    first = json.loads(lines[0])
    out, offset = [], 0
    for piece in pieces:
        out.append(ManifestBatch(name=manifest.name, path=str(manifest), node=node, host=first["host"], run=RUN,
                                 rank=first["rank"], pid=first["pid"], run_dir=str(run_dir), offset=offset, lines=piece))
        offset += len(piece)
    return out


def measure(tmp: Path, ranks: int, nodes: int, steps: int) -> dict[str, float]:
    nodes_dir = tmp / f"{ranks}x{nodes}" / "nodes"
    run_dir = generate_run(nodes_dir, run_id=RUN, ranks=ranks, steps=tuple(range(1, steps + 1)),
                           ranks_per_host=ranks // nodes, trace_bytes=0)
    manifests = sorted((run_dir / "manifest").glob("*.jsonl"))
    per_rank = [batches_of(m, f"{int(json.loads(m.open().readline())['rank']) // (ranks // nodes):056x}", run_dir)
                for m in manifests]
    controller_dir = tmp / f"{ranks}x{nodes}" / "controller" / RUN
    collector = RunCollector(controller_dir, node="f" * 56)
    step_bytes, step_seconds, step_peaks = [], [], []
    for step in range(steps):
        wire = [pickle.dumps(batches[step], protocol=5) for batches in per_rank]  # what each reply carries
        tracemalloc.start()
        began = time.perf_counter()
        for payload in wire:
            collector.receive(pickle.loads(payload))
        step_seconds.append(time.perf_counter() - began)
        step_peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        step_bytes.append(sum(len(w) for w in wire))
    copied = sum(p.stat().st_size for p in (controller_dir / "manifest").glob("*.jsonl"))
    original = sum(p.stat().st_size for p in manifests)
    report = {}
    for name, where in (("controller", controller_dir.parent), ("nodes", nodes_dir)):
        tracemalloc.start()
        began = time.perf_counter()
        [built] = build_reports([where])
        report[name] = (time.perf_counter() - began, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert len(built.processes) == ranks and built.problem_count == 0, (name, built.problem_count)
        assert len({p.node for p in built.processes}) == (nodes if name == "controller" else 1)
    return {
        "step_bytes": max(step_bytes[1:-1] or step_bytes), "per_rank": max(step_bytes[1:-1] or step_bytes) / ranks,
        "step_ms": sorted(step_seconds)[len(step_seconds) // 2] * 1e3, "step_peak": max(step_peaks),
        "overhead": copied / original, "report_s": report["controller"][0], "report_peak": report["controller"][1],
        "nodes_report_s": report["nodes"][0], "nodes_report_peak": report["nodes"][1], "batches": collector.batches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64x8,512x64", help="RANKSxNODES, comma list")
    parser.add_argument("--steps", type=int, default=4)
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in opts.sizes.split(","):
            ranks, nodes = (int(x) for x in size.split("x"))
            rows.append((ranks, nodes, measure(Path(tmp), ranks, nodes, opts.steps)))
    print(f"manifest records to the controller, {opts.steps} profiled steps, one batch per rank per step "
          f"(a middle step shown; pickled as Ray sends a reply)")
    print(f"{'ranks x nodes':>14} {'bytes/step':>11} {'bytes/rank/step':>16} {'collect ms/step':>16} "
          f"{'collect peak MiB':>17} {'copy/original':>14}")
    for ranks, nodes, r in rows:
        print(f"{f'{ranks} x {nodes}':>14} {r['step_bytes']:>11,.0f} {r['per_rank']:>16,.0f} {r['step_ms']:>16.1f} "
              f"{r['step_peak'] / 2**20:>17.2f} {r['overhead']:>14.4f}")
    print()
    print("rlprof report build: the controller's save path (gathered) vs the nodes' own manifests (copied by hand)")
    print(f"{'ranks x nodes':>14} {'controller s':>13} {'nodes s':>8} {'ratio':>6} {'controller peak MiB':>20} "
          f"{'nodes peak MiB':>15}")
    for ranks, nodes, r in rows:
        print(f"{f'{ranks} x {nodes}':>14} {r['report_s']:>13.2f} {r['nodes_report_s']:>8.2f} "
              f"{r['report_s'] / r['nodes_report_s']:>6.2f} {r['report_peak'] / 2**20:>20.1f} {r['nodes_report_peak'] / 2**20:>15.1f}")


if __name__ == "__main__":
    main()
