"""Trace bytes of a sampled role region vs the whole region (target: at least 10x smaller).

The actor update runs 16 micro-batches, each in ``with prof.iteration()``; the torch backend traces
it in discrete mode twice: once whole, once with ``profiler.schedule: {active: 1}`` (only the first
micro-batch). Sizes are those of the ``.json.gz`` files the manifest lists for ``actor_update``.

Run: ``.venv/bin/python bench/bench_sampling_bytes.py``
"""

from __future__ import annotations

import gzip
import logging
import tempfile
from pathlib import Path

import rlprof
from torch_bench_workload import step_body, tiny_mlp

MICRO_BATCHES = 16
STEPS = (1, 2)


def actor_trace_bytes(save_path: Path, schedule: dict | None) -> tuple[int, int]:
    """(gzip bytes, JSON bytes) of the actor_update traces of one run."""
    actor = {"enable": True, "all_ranks": True, "discrete": True}
    if schedule:
        actor["schedule"] = schedule
    config = {
        "global_profiler": {"tool": "torch", "steps": list(STEPS), "save_path": str(save_path)},
        "actor_rollout_ref": {"actor": {"profiler": actor}},
    }
    prof = rlprof.Profiler(config, roles=("actor",))
    model, optimizer, batch = tiny_mlp()
    for step in STEPS:
        prof.start_step(step)
        step_body(model, optimizer, batch, MICRO_BATCHES, prof.role, prof.iteration)
        prof.step_boundary()
    files = [prof.run.run_dir / a["path"] for a in prof.finalize() if a["region"] == "actor_update"]
    assert len(files) == len(STEPS), files
    return sum(f.stat().st_size for f in files), sum(len(gzip.decompress(f.read_bytes())) for f in files)


def main() -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        whole = actor_trace_bytes(Path(tmp) / "whole", None)
        sampled = actor_trace_bytes(Path(tmp) / "sampled", {"active": 1})
    print(f"actor_update with {MICRO_BATCHES} micro-batches, {len(STEPS)} steps, discrete captures")
    print(f"{'':22}{'.json.gz bytes':>16}{'JSON bytes':>14}")
    print(f"{'whole region':22}{whole[0]:>16,}{whole[1]:>14,}")
    print(f"{'schedule {active: 1}':22}{sampled[0]:>16,}{sampled[1]:>14,}")
    print(f"{'ratio whole/sampled':22}{whole[0] / sampled[0]:>16.1f}{whole[1] / sampled[1]:>14.1f}   (target >= 10)")


if __name__ == "__main__":
    main()
