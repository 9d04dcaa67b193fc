"""``run.py --async``: verl 0.9.1's fully async trainer (``verl.experimental.fully_async_policy.fully_async_main``).

The rollouter (a ``FullyAsyncRollouter`` actor driving one standalone ``hf`` replica in its own
resource pool) generates one prompt at a time into verl's ``MessageQueue``; the trainer (a
``FullyAsyncTrainer`` actor with its FSDP2 worker in the trainer pool) takes ``PROMPTS_PER_VERSION``
prompts a step, trains, and syncs its weights to the replica through the checkpoint engine after
every step (``trigger_parameter_sync_step=1``): one parameter version per training step.
``async_training.staleness_threshold`` > 0 lets the rollouter run up to that many versions' worth of
samples ahead of the trainer, so generation goes on while the trainer trains.

What changes from the synchronous example, and why (the rest of ``run.overrides`` stays):
the batch is fed one prompt at a time (``data.train_batch_size=0``, ``data.gen_batch_size=1``: verl
asserts both), the run's length is the rollouter's (``rollout.total_rollout_steps`` prompts, so
``versions × PROMPTS_PER_VERSION``), the rollout gets its own fake GPU (``rollout.n_gpus_per_node=1``,
two in Ray's books), and weights travel through the ``gloo`` checkpoint engine
(``verl_cpu_checkpoint_engine``) instead of the shipped ``nccl`` one.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass

MODULE = "verl.experimental.fully_async_policy.fully_async_main"
PROMPTS_PER_VERSION = 2
"""``actor.ppo_mini_batch_size`` × ``async_training.require_batches``: the trainer's step, in prompts
(each with ``rollout.n`` responses)."""
STALENESS = 1
"""``async_training.staleness_threshold``: the rollouter may hold ``(1 + STALENESS) × PROMPTS_PER_VERSION``
prompts generated with the current version (queued or in flight) before it waits for the next sync."""

SYNC_ONLY = (
    "data.train_batch_size=",
    "trainer.use_v1=",
    "trainer.v1.",
    "trainer.total_training_steps=",
    "trainer.experiment_name=",
    "transfer_queue.",
    "actor_rollout_ref.actor.ppo_mini_batch_size=",
    "+ray_kwargs.ray_init.num_gpus=",
    "+ray_kwargs.ray_init.num_cpus=",
)
"""The synchronous example's overrides that the fully async run replaces or does not read."""


def overrides(sync: list[str], versions: int) -> list[str]:
    """The fully async run's overrides: the synchronous example's, less ``SYNC_ONLY``, plus these."""
    kept = [o for o in sync if not o.startswith(SYNC_ONLY)]
    return kept + [
        # one prompt at a time into the queue; the trainer takes PROMPTS_PER_VERSION a step
        "data.train_batch_size=0",
        "data.gen_batch_size=1",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS_PER_VERSION}",
        f"rollout.total_rollout_steps={versions * PROMPTS_PER_VERSION}",
        "trainer.experiment_name=grpo-fully-async",
        # the rollout on its own resources: a standalone replica in its own pool
        "actor_rollout_ref.hybrid_engine=false",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=1",
        # a version per training step, and generation allowed to run ahead of it
        "async_training.trigger_parameter_sync_step=1",
        "async_training.require_batches=1",
        f"async_training.staleness_threshold={STALENESS}",
        "async_training.partial_rollout=true",
        # weights through verl's checkpoint engine, over gloo (nccl needs CUDA)
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
        "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl_cpu_checkpoint_engine",
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1",
        # Ray's books: a fake GPU for the trainer's pool and one for the rollout's; the trainer and
        # rollouter actors ask 10 CPUs each (logical, as in the synchronous example)
        "+ray_kwargs.ray_init.num_gpus=2",
        "+ray_kwargs.ray_init.num_cpus=32",
    ]


# ---- the overlap, shown: the replica's own records beside the trainer's ----------------------
EVENTS_ENV = "VERL_CPU_SERVER_EVENTS"
"""Names the file the ``hf`` server appends its records to (``verl_cpu_hf_server``)."""
EVENTS_FILE = "hf_server_events.jsonl"
LOG_FILE = "verl.log"
TRAINER_STEP = re.compile(r"\[FullyAsyncTrainer\] global_steps: (\d+) local_trigger_step: .* (\d\d:\d\d:\d\d\.\d{3})\s*$")
"""verl's ``FullyAsyncTrainer._fit_update_local_step`` print, right after the actor update of step N."""
METRIC = re.compile(r"([\w/.@-]+):(-?[\d.]+(?:e-?\d+)?)")


@dataclass
class Window:
    """The trainer's compute of one training step: it ended at ``t1``, after ``t1 - t0`` seconds."""

    step: int
    t0: float
    t1: float


def trainer_windows(lines: list[str], near: float) -> list[Window]:
    """Each training step's compute, from verl's own output: the wall-clock time its trainer printed
    after the actor update, and the step's ``dynamic_resource/train_compute_time_s`` (verl's sum of
    its reward, log-prob, advantage and update phases; logged with the next version's metrics, so the
    last step has none). ``near``: a wall-clock time of the run (the print has no date)."""
    ends, compute = {}, {}
    for line in lines:
        match = TRAINER_STEP.search(line)
        if match:
            ends[int(match[1])] = _wall(match[2], near)
            continue
        if "training/global_step:" in line and "dynamic_resource/train_compute_time_s:" in line:
            values = dict(METRIC.findall(line))
            compute[int(float(values["training/global_step"]))] = float(values["dynamic_resource/train_compute_time_s"])
    return [Window(step, ends[step] - compute[step], ends[step]) for step in sorted(ends) if step in compute]


def _wall(clock: str, near: float) -> float:
    """``HH:MM:SS.mmm`` (local time) as the wall-clock seconds closest to ``near``."""
    day = datetime.date.fromtimestamp(near)
    of_day = datetime.time.fromisoformat(clock)
    candidates = [datetime.datetime.combine(day + datetime.timedelta(days=d), of_day).timestamp() for d in (-1, 0, 1)]
    return min(candidates, key=lambda t: abs(t - near))


def server_events(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def overlap(windows: list[Window], events: list[dict]) -> list[dict]:
    """Per training step: how long the replica generated during the trainer's compute, in how many
    requests, with which parameter versions."""
    generated = [e for e in events if e["event"] == "generate"]
    rows = []
    for w in windows:
        during = [(max(w.t0, e["t0"]), min(w.t1, e["t1"]), e["version"]) for e in generated]
        during = [(a, b, v) for a, b, v in during if b > a]
        rows.append(
            {
                "step": w.step,
                "trainer_s": w.t1 - w.t0,
                "generating_s": sum(b - a for a, b, _ in during),
                "requests": len(during),
                "versions": sorted({v for _, _, v in during if v is not None}),
            }
        )
    return rows


def syncs(events: list[dict]) -> list[dict]:
    """Each weight sync as the replica saw it: paused (gate closed) to resumed, the load inside it,
    and the version it then generated with."""
    out, current = [], None
    for e in events:
        if e["event"] == "pause":
            current = {"pause": e["t"], "load_s": 0.0, "version": None}
        elif current is not None and e["event"] == "weights":
            current["load_s"] += e["t1"] - e["t0"]
        elif current is not None and e["event"] == "version":
            current["version"] = e["version"]
        elif current is not None and e["event"] == "resume":
            current["paused_s"] = e["t"] - current["pause"]
            out.append(current)
            current = None
    return out


def summary(out: str, rc: int = 0) -> list[str]:
    """What ``run.py --async`` prints after the run (from OUT/verl.log and OUT/hf_server_events.jsonl); ``rc``:
    verl's exit status (a run that failed is said to have, not blamed on the replica)."""
    events = server_events(os.path.join(out, EVENTS_FILE))
    if not events and rc != 0:
        return [f"[verl-cpu] overlap: none: verl exited with status {rc} before the replica generated "
                f"(verl's output: {os.path.join(out, LOG_FILE)})"]
    if not events:
        return ["[verl-cpu] overlap: the replica recorded nothing"]
    with open(os.path.join(out, LOG_FILE)) as f:
        windows = trainer_windows(f.read().splitlines(), near=events[0].get("t0", events[0].get("t", 0.0)))
    lines = []
    for row in overlap(windows, events):
        lines.append(
            f"[verl-cpu] overlap: training step {row['step']}: the trainer computed {row['trainer_s']:.3f} s; the replica "
            f"generated during {row['generating_s']:.3f} s of it ({row['requests']} requests, weights of version "
            f"{','.join(map(str, row['versions'])) or '-'})"
        )
    for s in syncs(events):
        lines.append(
            f"[verl-cpu] weight sync to version {s['version']}: the replica paused {s['paused_s']:.3f} s "
            f"(loading the weights {s['load_s']:.3f} s)"
        )
    return lines


def run(cmd: list[str], env: dict, out: str) -> int:
    """Runs verl with its output streamed through and kept in OUT/verl.log, the replica's records in
    OUT/hf_server_events.jsonl; then prints the overlap. Returns verl's exit status."""
    events = os.path.join(out, EVENTS_FILE)
    if os.path.exists(events):
        os.remove(events)
    env = {**env, EVENTS_ENV: events}
    with open(os.path.join(out, LOG_FILE), "w") as keep:
        proc = subprocess.Popen(cmd, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                bufsize=1, errors="replace")
        for line in proc.stdout:
            sys.stdout.write(line)
            keep.write(line)
        rc = proc.wait()
    for line in summary(out, rc):
        print(line, flush=True)
    return rc
