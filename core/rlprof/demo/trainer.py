"""The demo's single controller: a GRPO loop over :class:`PolicyWorker` actors on a local Ray cluster.

Read it as the template for profiling a verl-style trainer with :mod:`rlprof.ray`: the controller
builds its :class:`~rlprof.ray.ProfilingController` first (one run id), creates each worker with
``controller.worker_options(spec)``, and brackets every step with ``start_step``/``step_boundary``;
the workers mark their own role regions. A worker lost mid-run ends the training, not the
profiling: the others still finalize and the manifest says who was lost. Ctrl-C does the same:
the step in progress is closed, every worker finalizes, and the caller gets the partial run.

The demo owns its output: Ray is started without forwarding the workers' stdout/stderr to this
terminal (``log_to_driver=False``; what the workers report reaches the user through the manifest
and ``rlprof report``), and without Ray's notice that it enabled token authentication.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from rlprof.config.schema import ProfilerConfig
from rlprof.integrations.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec, describe_error
from rlprof.demo.grpo import Sizes, group_advantages, toy_reward
from rlprof.demo.preflight import HYBRID_ENGINE_ROLES
from rlprof.demo.replicas import ReplicaFailed, Replicas
from rlprof.demo.worker import PolicyWorker


class TrainingFailed(RuntimeError):
    """A training phase did not complete on every worker."""


@dataclass
class DemoRun:
    run_id: str
    run_dir: Path
    failures: list[str] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    """Every worker's artifact records (paths relative to ``run_dir``)."""
    interrupted_at: int | None = None
    """The step Ctrl-C stopped (0: before the first step began), or None."""
    logs_dir: str | None = None
    """Ray's log directory of this run's session (the workers' stdout/stderr), when Ray ran here."""

    @property
    def ok(self) -> bool:
        return not self.failures


def train(config: ProfilerConfig, *, workers: int, train_steps: int, sizes: Sizes = Sizes(), timeout_s: float = 120.0,
          nodes: int = 1, say: Callable[[str], None] = print, replicas: int = 0, perturb: str | None = None,
          late: dict[int, float] | None = None, slow_in: str | None = None, slow_from: int = 1,
          long_request: tuple[int, int] | None = None) -> DemoRun:
    """Start a local Ray cluster (unless one is up), run the loop, shut the cluster down again.

    ``replicas``: 0, the workers generate themselves (hybrid engine); N, rollout runs in N vLLM replicas
    (:mod:`rlprof.demo.replicas`, agent-loop mode) and the workers host actor and ref.
    ``perturb``: a layer of the policy whose weights every worker scales by 1.0001 before training
    (``rlprof demo --perturb``), for comparing two runs' precision dumps.
    ``late``: rank -> ms that rank enters actor update late, on purpose (``rlprof demo --slow-rank``), from step
    ``slow_from`` on (``--slow-from-step``); with
    ``slow_in``, a region, the ms it spends longer inside that region instead (``--slow-in``).
    ``long_request``: ``(replica, tokens)``, with ``replicas``: one request of that many tokens per step on that
    replica, every other at most 8 (``--long-request R:N``, a planted rollout tail).
    ``nodes`` > 1: a simulated cluster of that many Ray nodes on this machine (:func:`node_roots` says
    where each writes), the workers spread over them; the controller's ``save_path`` receives every
    node's manifest records (and, with ``gather: traces``, their files).

    :raises rlprof.ConfigError: the configuration is invalid for some worker (checked before Ray starts).
    """
    import ray

    controller = ProfilingController(config, timeout_s=timeout_s)
    roles = tuple(r for r in HYBRID_ENGINE_ROLES if r != "rollout") if replicas else HYBRID_ENGINE_ROLES
    stages = {role: HYBRID_ENGINE_STAGES[role] for role in roles if role in HYBRID_ENGINE_STAGES}
    specs = [WorkerSpec(rank=rank, world_size=workers, roles=roles, stages=stages,
                        group="actor_rollout_ref") for rank in range(workers)]
    options = [controller.worker_options(spec) for spec in specs]  # every worker's plan, resolved up front
    started_here = not ray.is_initialized()
    cluster = None
    try:
        if started_here:
            began = time.perf_counter()
            if nodes > 1:
                from rlprof.integrations.nodes import pinned, simulated_cluster

                roots = node_roots(config.global_.save_path, nodes)
                cluster = simulated_cluster(roots)
                options = [{**opts, **pinned(cluster.node_ids[rank % nodes])} for rank, opts in enumerate(options)]
                say(f"ray started in {time.perf_counter() - began:.1f} s: {nodes} simulated nodes, each writing under "
                    f"its own root in {roots[0].parent}")
            else:
                start_ray(num_cpus=2)
                say(f"ray started in {time.perf_counter() - began:.1f} s")
        return _train(controller, specs, options, train_steps, sizes, timeout_s, say, replicas, perturb, late or {}, slow_in,
                      slow_from, long_request)
    finally:
        if started_here:
            ray.shutdown()  # also after a Ctrl-C inside ray.init: no Ray process is left behind
        if cluster is not None:
            cluster.shutdown()


def node_roots(save_path: str, nodes: int) -> list[Path]:
    """Where each simulated node of ``rlprof demo --nodes N`` keeps its files: ``<save_path>-nodes/node<i>``,
    beside the save path rather than in it, so that ``rlprof report <save_path>`` reads only what
    reached the controller (as it would on a real cluster)."""
    base = Path(save_path).absolute()
    return [base.parent / f"{base.name}-nodes" / f"node{i}" for i in range(nodes)]


RAY_TOKEN_NOTICE_LOGGER = "ray._private.authentication.authentication_token_setup"
"""Where Ray (2.5x) logs "Token authentication is enabled for this Ray cluster..." at every local start."""


def start_ray(num_cpus: int) -> None:
    """A local Ray cluster for the demo, quiet: only Ray's warnings about real problems reach the user.

    * ``log_to_driver=False``: the workers' stdout/stderr stay in Ray's log files (named on failure);
      what the user needs from them (artifacts, backend errors, lost workers) is in the manifest.
    * The token-authentication notice is informational (Ray secured its own local cluster): its
      logger is raised to ERROR while ``ray.init`` runs, token authentication itself stays on.
    * ``logging_level=WARNING`` drops Ray's INFO start-up lines.
    * ``address="local"``: a cluster of its own. Without it Ray joins a cluster it finds on the host (one
      started with ``ray start``, another job's), where ``num_cpus`` is refused and the demo's workers
      would share someone else's machine.
    """
    import ray

    notice = logging.getLogger(RAY_TOKEN_NOTICE_LOGGER)
    level = notice.level
    notice.setLevel(logging.ERROR)
    try:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    finally:
        notice.setLevel(level)


def ray_logs_dir() -> str | None:
    """This Ray session's log directory (where ``log_to_driver=False`` left the workers' output)."""
    try:
        import ray._private.worker as ray_worker

        return ray_worker._global_node.get_logs_dir_path()
    except Exception:  # private API; only used to point at the logs
        return None


def _train(controller: ProfilingController, specs: list[WorkerSpec], options: list[dict], train_steps: int,
           sizes: Sizes, timeout_s: float, say, replicas: int = 0, perturb: str | None = None,
           late: dict[int, float] | None = None, slow_in: str | None = None, slow_from: int = 1,
           long_request: tuple[int, int] | None = None) -> DemoRun:
    import ray

    run = DemoRun(controller.run_id, Path(controller.config.global_.save_path).absolute() / controller.run_id,
                  logs_dir=ray_logs_dir())
    began = time.perf_counter()
    actor_class = ray.remote(PolicyWorker)
    for spec, opts in zip(specs, options):
        controller.add(spec, actor_class.options(**opts).remote(spec.rank, spec.world_size, sizes, perturb=perturb,
                                                                late_ms=(late or {}).get(spec.rank, 0.0), slow_in=slow_in,
                                                                slow_from=slow_from))
    step = 0
    engines = None
    try:
        if replicas:
            engines = Replicas(controller, replicas, timeout_s, say, long_request)
        _require(controller.setup())
        if engines is not None and controller.step_metrics is not None:
            # the replicas send their timings and request records too: a step waits for them (their first batch
            # comes once each has found the run's mailbox), else a replica's first step could be written without it
            controller.step_metrics.expect(len(controller.handles) + replicas)
        phase = _Phase(controller, timeout_s)
        address = _gloo_address()
        phase("join process group", lambda rank, w: w.join_process_group.remote(address))
        say(f"{len(specs)} workers ready in {time.perf_counter() - began:.1f} s")
        prompts_source = torch.Generator().manual_seed(0)
        with _CtrlC() as ctrl_c:
            for step in range(1, train_steps + 1):
                ctrl_c.check()
                _train_step(controller, phase, step, sizes, prompts_source, say, engines)
    except (TrainingFailed, ReplicaFailed) as exc:
        run.failures.append(str(exc))
        where = f"at step {step}" if step else "before the first step"
        say(f"training stopped {where}: a worker call failed (each failure is listed below)")
    except KeyboardInterrupt:
        # Ray blocks SIGINT in its own processes: the workers are alive and still hold open captures.
        run.interrupted_at = step
        where = f"at step {step}" if step else "before the first step"
        say(f"interrupted {where}: finalizing what was captured so far (Ctrl-C again quits at once)")
    if engines is not None:
        run.failures.extend(engines.close(run.artifacts))
    final = controller.finalize(reason="interrupted" if run.interrupted_at is not None else "end")
    run.failures.extend(str(f) for f in final.failures)
    for records in final.results.values():
        run.artifacts.extend(records)
    if not run.failures and run.interrupted_at is None:
        ray.get([w.close.remote() for w in controller.handles], timeout=timeout_s)
        if controller.pending:  # files a tool writes at process exit (nsys with capture-range-end=repeat)
            began = time.perf_counter()
            controller.exit_workers()
            controller.after_exit()
            say(f"workers exited; files written at exit moved into the run in {time.perf_counter() - began:.1f} s")
    return run


def _train_step(controller: ProfilingController, phase: "_Phase", step: int, sizes: Sizes,
                prompts_source: torch.Generator, say, engines=None) -> None:
    tag = f"step {step}{' (profiled)' if controller.profiles(step) else ''}".ljust(17)
    began = time.perf_counter()
    _require(controller.start_step(step))
    if controller.profiles(step):
        say(f"{tag}  start step         {time.perf_counter() - began:5.2f} s  (captures opened)")
    workers = len(controller.handles)
    prompts = torch.randint(sizes.vocab, (workers * sizes.prompts_per_worker, sizes.prompt_len), generator=prompts_source)
    shards = prompts.chunk(workers)

    began = time.perf_counter()
    if engines is None:
        responses = torch.cat(phase("rollout generate", lambda rank, w: w.generate.remote(shards[rank])))
    else:  # agent-loop: the replicas generate, each worker takes its shard's responses
        responses = engines.generate(prompts, step, sizes)
        per_worker = responses.chunk(workers)
        phase("rollout generate", lambda rank, w: w.take_rollout.remote(shards[rank], per_worker[rank]))
    rewards = toy_reward(prompts.repeat_interleave(sizes.group_size, dim=0), responses)
    advantages = group_advantages(rewards, sizes.group_size).chunk(workers)
    say(f"{tag}  rollout generate   {time.perf_counter() - began:5.2f} s  mean reward {rewards.mean():.3f}")
    for label, call in (("ref log-prob", "compute_ref_log_prob"), ("actor log-prob", "compute_log_prob")):
        began = time.perf_counter()
        phase(label, lambda rank, w: getattr(w, call).remote())
        say(f"{tag}  {label:<18} {time.perf_counter() - began:5.2f} s")
    began = time.perf_counter()
    metrics = phase("actor update", lambda rank, w: w.update_actor.remote(advantages[rank]))
    loss = sum(m["loss"] for m in metrics) / len(metrics)
    kl = sum(m["kl"] for m in metrics) / len(metrics)
    say(f"{tag}  actor update       {time.perf_counter() - began:5.2f} s  loss {loss:+.4f}  kl {kl:.5f}")
    began = time.perf_counter()
    _require(controller.step_boundary())
    if controller.profiles(step):
        say(f"{tag}  step boundary      {time.perf_counter() - began:5.2f} s  (captures closed; traces written in the background)")


class _CtrlC:
    """Ctrl-C during the training loop, remembered as well as raised.

    The first Ctrl-C raises KeyboardInterrupt in the main thread, wherever it is; Python drops one that
    lands while a finalizer runs (an object's ``__del__``: Ray's object references are collected all
    the time in the driver) and prints nothing when stderr is a pipe. Seen once in CI: SIGINT sent right
    after step 2's boundary, and the demo trained all 500 steps. The flag set here stops the loop at the
    next step in that case. Outside the loop (finalizing) the previous handler is back: a second Ctrl-C
    quits at once. Only the main thread may set a handler; elsewhere this does nothing."""

    def __init__(self) -> None:
        self.pressed = threading.Event()
        self._installed = False
        self._previous: Any = None

    def __enter__(self) -> "_CtrlC":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._installed:  # a handler set outside Python reads as None: Python's own then
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.pressed.set()
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise the Ctrl-C that a finalizer swallowed, if any."""
        if self.pressed.is_set():
            raise KeyboardInterrupt


class _Phase:
    """Runs one training call on every live worker and waits at most ``timeout_s`` for all of them."""

    def __init__(self, controller: ProfilingController, timeout_s: float):
        self.controller = controller
        self.timeout_s = timeout_s

    def __call__(self, name: str, submit: Callable[[int, Any], Any]) -> list[Any]:
        import ray

        refs = [submit(rank, worker) for rank, worker in enumerate(self.controller.handles)]
        try:
            return ray.get(refs, timeout=self.timeout_s)
        except Exception as exc:  # a dead worker, a raising method, a timeout
            raise TrainingFailed(f"{name}: {describe_error(exc)}") from exc


def _require(fan_out) -> None:
    if fan_out.failures:
        raise TrainingFailed("; ".join(str(f) for f in fan_out.failures))


def _gloo_address() -> str:
    """A free TCP port on this host for torch.distributed's rendezvous (rank 0 listens on it)."""
    import ray

    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    return f"tcp://{ray.util.get_node_ip_address()}:{port}"
