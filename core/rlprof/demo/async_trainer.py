"""The controller of ``rlprof demo --async``: verl's fully async policy in small, on a local Ray cluster.

Rollout and training overlap. N rollout replicas (:class:`~rlprof.demo.async_replica.RolloutReplica`,
each a Ray actor with its own Profiler and ``replica_rank``) generate without pause with the tiny
policy and put groups of responses into a bounded queue (:mod:`rlprof.demo.samples`), each tagged with
the parameter version it was generated with. The trainer ranks
(:class:`~rlprof.demo.async_worker.AsyncPolicyWorker`) take a step's batch from the queue, train, and
send the new weights to every replica, which pauses, loads and resumes: one weight sync per version.
The staleness limit (default 1) holds generation back when the queue is full or samples would be too
stale, so that generation of step ``N + 1``'s samples overlaps the training of step ``N``.

A step is a parameter version: the trainer's step ``N`` makes version ``N``; a replica's step ``N``
runs between the syncs that end the trainer's steps ``N - 1`` and ``N``. The controller brackets the
trainer's steps with :class:`~rlprof.ray.ProfilingController` as the synchronous demo does; each
replica begins and ends its own steps at its syncs, so the captures of version ``N`` on the trainer
ranks and on every replica share one window. Every step, the controller records how stale the samples
trained on were (a ``staleness`` record, profiled step or not).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from rlprof.config.schema import ProfilerConfig
from rlprof.demo.async_replica import ReplicaStopped, RolloutReplica
from rlprof.demo.async_worker import AsyncPolicyWorker
from rlprof.demo.grpo import Sizes
from rlprof.demo.samples import SampleQueue, StalenessLimit
from rlprof.demo.trainer import DemoRun, TrainingFailed, _CtrlC, _gloo_address, _Phase, _require, ray_logs_dir, start_ray
from rlprof.integrations.ray import ProfilingController, WorkerSpec
from rlprof.manifest import StalenessRecord, record_fields

ASYNC_SIZES = Sizes(response_len=24)
"""Longer responses than the synchronous demo's: generating a step's samples takes about as long as
training on them, so that both sides of the overlap show (neither is always the one waiting)."""
TRAINER_ROLES = ("actor",)
TRAINER_STAGES = {"actor": ("wait_samples", "update", "weight_send")}
STALENESS_SOURCE = "rlprof demo --async"
"""The ``source`` of the controller's ``staleness`` records."""


def train_async(config: ProfilerConfig, *, workers: int, replicas: int, train_steps: int, staleness: int = 1,
                sizes: Sizes = ASYNC_SIZES, timeout_s: float = 120.0, say: Callable[[str], None] = print) -> DemoRun:
    """Start a local Ray cluster (unless one is up), run ``train_steps`` versions, shut the cluster down.

    :raises rlprof.ConfigError: the configuration is invalid for some worker (checked before Ray starts).
    """
    import ray

    controller = ProfilingController(config, timeout_s=timeout_s)
    specs = [WorkerSpec(rank=rank, world_size=workers, roles=TRAINER_ROLES, stages=TRAINER_STAGES,
                        group="actor_rollout_ref") for rank in range(workers)]
    options = [controller.worker_options(spec) for spec in specs]
    started_here = not ray.is_initialized()
    try:
        if started_here:
            began = time.perf_counter()
            start_ray(num_cpus=2)
            say(f"ray started in {time.perf_counter() - began:.1f} s")
        return _train(controller, specs, options, replicas, train_steps, staleness, sizes, timeout_s, say)
    finally:
        if started_here:
            ray.shutdown()


def _train(controller: ProfilingController, specs: list[WorkerSpec], options: list[dict], replicas: int,
           train_steps: int, staleness: int, sizes: Sizes, timeout_s: float, say) -> DemoRun:
    import ray

    run = DemoRun(controller.run_id, Path(controller.config.global_.save_path).absolute() / controller.run_id,
                  logs_dir=ray_logs_dir())
    began = time.perf_counter()
    batch = len(specs) * sizes.prompts_per_worker
    limit = StalenessLimit(batch=batch, staleness=staleness, capacity=(staleness + 1) * batch, last_step=train_steps)
    queue = ray.remote(SampleQueue).options(num_cpus=0).remote(limit, len(specs))
    replica_class = ray.remote(RolloutReplica).options(num_cpus=0)
    engines = [replica_class.remote(controller.config, r, replicas, controller.run_id, sizes, queue, train_steps)
               for r in range(replicas)]
    worker_class = ray.remote(AsyncPolicyWorker)
    for spec, opts in zip(specs, options):
        controller.add(spec, worker_class.options(**opts).remote(spec.rank, spec.world_size, sizes, queue, engines))
    step = 0
    try:
        _require(controller.setup())
        phase = _Phase(controller, timeout_s)
        address = _gloo_address()
        phase("join process group", lambda rank, w: w.join_process_group.remote(address))
        ray.get([e.ready.remote() for e in engines], timeout=timeout_s)
        say(f"{len(specs)} trainer workers and {replicas} rollout replicas ready in {time.perf_counter() - began:.1f} s "
            f"(staleness {staleness}, queue of {limit.capacity} groups)")
        ray.get([e.start.remote() for e in engines], timeout=timeout_s)
        with _CtrlC() as ctrl_c:
            for step in range(1, train_steps + 1):
                ctrl_c.check()
                _version(controller, phase, step, timeout_s, say)
    except (TrainingFailed, ReplicaStopped) as exc:
        run.failures.append(str(exc))
        where = f"at version {step}" if step else "before the first version"
        say(f"training stopped {where}: a worker or replica call failed (each failure is listed below)")
    except KeyboardInterrupt:
        run.interrupted_at = step
        where = f"at step {step}" if step else "before the first step"
        say(f"interrupted {where}: finalizing what was captured so far (Ctrl-C again quits at once)")
    run.failures.extend(_close_replicas(queue, engines, run.artifacts, timeout_s))
    final = controller.finalize(reason="interrupted" if run.interrupted_at is not None else "end")
    run.failures.extend(str(f) for f in final.failures)
    for records in final.results.values():
        run.artifacts.extend(records)
    if not run.failures and run.interrupted_at is None:
        ray.get([w.close.remote() for w in controller.handles], timeout=timeout_s)
    return run


def _version(controller: ProfilingController, phase: _Phase, step: int, timeout_s: float, say) -> None:
    """The trainer's step ``step``: wait for samples, train, sync the weights of version ``step``."""
    profiled = controller.profiles(step)
    tag = f"version {step}{' (profiled)' if profiled else ''}".ljust(20)
    _require(controller.start_step(step))
    began = time.perf_counter()
    versions = phase("wait samples", lambda rank, w: w.wait_samples.remote(step, timeout_s))
    behind = [step - 1 - v for per_rank in versions for v in per_rank]
    record = StalenessRecord.of(step, behind, STALENESS_SOURCE)
    controller.write(record.TYPE, **record_fields(record))
    say(f"{tag}  wait samples  {time.perf_counter() - began:5.2f} s  staleness mean {sum(behind) / len(behind):.2f}, "
        f"max {max(behind)} (versions behind)")
    began = time.perf_counter()
    metrics = phase("actor update", lambda rank, w: w.update.remote())
    loss = sum(m["loss"] for m in metrics) / len(metrics)
    say(f"{tag}  actor update  {time.perf_counter() - began:5.2f} s  loss {loss:+.4f}")
    began = time.perf_counter()
    answers = phase("weight sync", lambda rank, w: w.send_weights.remote(step))
    paused = [a["pause_ms"] for per_rank in answers for a in per_rank]
    say(f"{tag}  weight sync   {time.perf_counter() - began:5.2f} s  replicas paused "
        + ", ".join(f"{ms:.1f}" for ms in paused) + " ms")
    _require(controller.step_boundary())


def _close_replicas(queue, engines: list, artifacts: list, timeout_s: float) -> list[str]:
    """End generation on every replica (each finalizes its Profiler), then the queue; failures as lines."""
    import ray

    failures = []
    try:
        ray.get(queue.close.remote(), timeout=timeout_s)
    except Exception as exc:
        failures.append(f"sample queue: close: {type(exc).__name__}: {exc}")
    for rank, engine in enumerate(engines):
        try:
            artifacts.extend(ray.get(engine.close.remote(), timeout=timeout_s))
        except Exception as exc:
            from rlprof.integrations.ray import describe_error

            failures.append(f"replica {rank}: close: {describe_error(exc)}")
        ray.kill(engine)
    ray.kill(queue)
    return failures
