"""Ray glue: one controller, many worker actors, one run directory.

verl runs a single controller process that drives worker actors (each hosting roles on one rank).
rlprof follows that shape:

* **Before a worker exists** the controller asks :func:`worker_options` for its ``.options(...)``:
  the plan of that worker is resolved on the controller, so a backend that must start *with* the
  process (nsys) can add to its ``runtime_env``, and the run id reaches the worker's environment.
* **In the worker** the actor class inherits :class:`ProfiledWorker`; its training methods wrap
  work in ``self.profiler.role(...)`` and ``self.profiler.iteration()``.
* **Around every step** the controller's :class:`ProfilingController` fans ``start_step`` /
  ``step_boundary`` out to the workers (only on profiled steps: other steps cost nothing), and
  ``finalize`` at the end. Every fan-out waits at most ``timeout_s``: a dead or hung worker is
  reported (which worker, which rank, what error), recorded in the run's manifest, and never
  hangs the controller; the other ranks carry on and keep their artifacts. A worker that died or
  timed out is **not waited for again**: later fan-outs skip it (and say so once), so a hung rank
  costs the timeout once per run, not once per step. A hung worker that answers again (its stuck
  call finished) rejoins at the next fan-out; ``finalize`` is still sent to it, without waiting, so
  it can write its captures if it ever gets there.
* **Many nodes** (:mod:`rlprof.integrations.nodes`): every reply a worker sends at ``setup``, a
  profiled step's end and ``finalize`` carries the lines its manifest gained since, which the
  controller appends in its own run directory, so one ``rlprof report`` sees every node; a dead
  node is recorded as lost; ``gather: traces`` streams the files too (:mod:`rlprof.integrations.gather`);
  ``finish_hook_cmd`` runs once per node.

A run, end to end::

    controller = ProfilingController(config)                  # makes the run id all ranks share
    for spec in (WorkerSpec(rank=r, world_size=2, roles=("actor", "rollout", "ref")) for r in range(2)):
        controller.add(spec, Worker.options(**controller.worker_options(spec)).remote())
    controller.setup()                                          # each worker builds its Profiler
    for step in range(1, steps + 1):
        controller.start_step(step)
        ray.get([w.train_step.remote() for w in controller.handles])
        controller.step_boundary()
    controller.finalize()                                       # artifact records per worker

Workers should be ordinary (synchronous) actors: Ray runs the calls one caller submits to such an
actor in order, so ``start_step`` lands before the step's training calls. Ray is imported only
when the controller fans out (``import rlprof`` never imports it; :func:`worker_options`,
:class:`ProfiledWorker` and ``rlprof report`` work without it).
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rlprof.config.schema import ProfilerConfig, load_config
from rlprof.context import RuntimeEnvContext
from rlprof.errors import BackendError
from rlprof.layout import hostname
from rlprof.integrations.gather import RunFiles
from rlprof.integrations.nodes import (ManifestCursor, NodeInfo, RunCollector, Sent, batch_of, current_node,
                                       finish_hook_runners, node_save_path)
from rlprof.manifest import FAILURE_RECORD, NODE_LOST_RECORD, short_node
from rlprof.runtime.plan import primary_role, resolve_plan
from rlprof.runtime.run_id import RUN_ID_ENV, run_id_for

log = logging.getLogger("rlprof")

DEFAULT_TIMEOUT_S = 300.0
"""How long a fan-out waits for a worker. Generous: closing a capture can mean writing a large trace."""



# ------------------------------------------------------------------------------ what a worker is

HYBRID_ENGINE_STAGES: Mapping[str, tuple[str, ...]] = {
    "rollout": ("generate",),
    "ref": ("compute_log_prob",),
    "actor": ("compute_log_prob", "update"),
}
"""The regions a verl hybrid-engine worker (actor+rollout+ref in one process) runs every step, in
order. Pass it as ``stages`` so the plan can count discrete captures exactly."""


@dataclass(frozen=True)
class WorkerSpec:
    """Who one worker actor is: the arguments its :class:`~rlprof.Profiler` is built with.

    ``group`` names the worker group (``actor_rollout_ref``, ``critic``...) so that rank 0 of two
    groups stay apart in reports.
    """

    rank: int
    world_size: int
    roles: tuple[str, ...]
    stages: Mapping[str, Sequence[str]] | None = None
    replica_rank: int | None = None
    num_replicas: int | None = None
    group: str = "workers"

    @property
    def label(self) -> str:
        return f"{self.group}/rank{self.rank}"

    def profiler_kwargs(self) -> dict[str, Any]:
        """The keyword arguments :class:`~rlprof.Profiler` and :func:`worker_options` take."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "roles": tuple(self.roles),
            "stages": self.stages,
            "replica_rank": self.replica_rank,
            "num_replicas": self.num_replicas,
        }


# ------------------------------------------------------------------------------ controller: options


def worker_options(
    config: Any,
    rank: int,
    world_size: int,
    roles: Sequence[str],
    stages: Mapping[str, Sequence[str]] | None = None,
    *,
    replica_rank: int | None = None,
    num_replicas: int | None = None,
    run_id: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    backends: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``.options(**worker_options(...))`` for the actor that will be ``rank`` hosting ``roles``.

    Called on the controller before the actor is created. Resolves that worker's plan, loads the
    selected backends and merges their ``worker_runtime_env`` contributions into ``runtime_env``
    (given ``stages``, the plan knows exactly how many captures the worker opens, which nsys needs).
    ``run_id`` is handed to the worker as ``RLPROF_RUN_ID`` so a Profiler the worker builds itself
    joins the controller's run. ``backends`` (``{name: instance}``) replaces entry points, as in
    :class:`~rlprof.Profiler`, for tests.

    :raises rlprof.ConfigError: the worker's plan is invalid, or two backends set the same
        runtime_env key to different values.
    """
    cfg = load_config(config)
    plan = resolve_plan(cfg, rank=rank, world_size=world_size, roles=tuple(roles),
                        replica_rank=replica_rank, num_replicas=num_replicas)
    env: dict[str, Any] = _merged({}, dict(runtime_env or {}), "runtime_env")
    if run_id:
        env = _merged(env, {"env_vars": {RUN_ID_ENV: run_id}}, "run_id")
    if plan.active:
        from rlprof.runtime.registry import Backends

        registry = Backends(plan.tools, rank=rank, instances=backends)
        if registry.has("worker_runtime_env"):
            expected = plan.expected_captures(stages)
            role = primary_role(plan)
            for name in plan.tools:
                ctx = RuntimeEnvContext(
                    backend=name, tool_config=registry.validated_tool_config(name, cfg.roles[role]),
                    rank=rank, world_size=world_size, roles=tuple(roles),
                    captures=expected != 0, expected_captures=expected,
                )
                env = _merged(env, registry.call_one(name, "worker_runtime_env", ctx=ctx) or {}, f"backend {name!r}")
    return {"runtime_env": env} if env else {}


def _merged(base: dict[str, Any], fragment: Mapping[str, Any], source: str, path: str = "runtime_env") -> dict[str, Any]:
    """``base`` with ``fragment`` merged in (nested mappings merge); a conflicting value is an error."""
    out = dict(base)
    for key, value in fragment.items():
        here = f"{path}.{key}"
        if key in out and isinstance(out[key], Mapping) and isinstance(value, Mapping):
            out[key] = _merged(dict(out[key]), value, source, here)
        elif key in out and out[key] != value:
            raise BackendError(f"{here}: {source} sets {value!r} but it is already {out[key]!r}; "
                               "allowed: one value per key (select fewer backends or set it once)", key=here)
        else:
            out[key] = dict(value) if isinstance(value, Mapping) else value
    return out


# ------------------------------------------------------------------------------ worker side


class ProfiledWorker(RunFiles):
    """Mixin for a Ray actor class hosting roles on one rank: it owns that rank's Profiler.

    The controller calls the ``rlprof_*`` methods (through :class:`ProfilingController`); the
    worker's own methods use ``self.profiler.role(role, stage)`` and ``self.profiler.iteration()``.
    Before :meth:`rlprof_setup` ``self.profiler`` is a Profiler that profiles nothing, so the
    training code runs the same with profiling off.
    """

    _rlprof_profiler = None
    _rlprof_cursor = None
    _rlprof_node_hook = None

    @property
    def profiler(self):
        if self._rlprof_profiler is None:
            from rlprof.runtime.profiler import Profiler

            self._rlprof_profiler = Profiler(None)
        return self._rlprof_profiler

    def rlprof_setup(
        self,
        config: Any,
        *,
        rank: int,
        world_size: int,
        roles: Sequence[str],
        stages: Mapping[str, Sequence[str]] | None = None,
        replica_rank: int | None = None,
        num_replicas: int | None = None,
        run_id: str | None = None,
        overrides: Iterable[str] = (),
        backends: Mapping[str, Any] | None = None,
        send_manifest: bool = False,
    ) -> Any:
        """Build this rank's Profiler; returns :meth:`rlprof_info`. ``backends`` maps names to
        backend instances or classes (instantiated here), replacing entry points (tests).
        ``send_manifest`` (the controller sets it on every call): the reply is a
        :class:`~rlprof.integrations.nodes.Sent` carrying the manifest lines written since the last
        reply, so the controller's run directory holds every node's records."""
        from rlprof.runtime.profiler import Profiler

        if self._rlprof_profiler is not None:
            self._rlprof_profiler.finalize(reason="replaced")
        here = node_save_path()
        if here is not None:  # this node writes under its own root (rlprof.integrations.nodes)
            config, overrides = load_config(config, overrides).with_overrides(save_path=here), ()
        instances = None if backends is None else {n: b() if isinstance(b, type) else b for n, b in backends.items()}
        self._rlprof_profiler = Profiler(
            config, rank=rank, world_size=world_size, roles=tuple(roles), stages=stages,
            replica_rank=replica_rank, num_replicas=num_replicas, run_id=run_id, overrides=overrides,
            backends=instances,
        )
        self._rlprof_cursor = None
        return self._rlprof_reply(self.rlprof_info(), send_manifest)

    def rlprof_info(self) -> dict[str, Any]:
        """Where this worker runs and what it profiles (for the controller's reports)."""
        prof = self.profiler
        return {
            "rank": prof.run.rank,
            "host": prof.run.host,
            "pid": prof.run.pid,
            "active": prof.active,
            "selected_roles": list(prof.plan.selected_roles),
            "run_dir": str(prof.run.run_dir),
            "node": current_node(),
            "manifest": str(prof.manifest_path) if prof.manifest_path is not None else None,
        }

    def rlprof_start_step(self, step: int) -> None:
        self.profiler.start_step(step)

    def rlprof_step_boundary(self, send_manifest: bool = False) -> Any:
        self.profiler.step_boundary()
        return self._rlprof_reply(None, send_manifest)

    def rlprof_finalize(self, reason: str = "end", send_manifest: bool = False) -> Any:
        """Finalize this rank's Profiler; returns its artifact records."""
        return self._rlprof_reply(self.profiler.finalize(reason), send_manifest)

    def _rlprof_run_dir(self):
        return self.profiler.run.run_dir

    def rlprof_exit(self) -> None:
        """End this worker's process (after ``finalize``): tools that write at exit (nsys) write now."""
        import ray

        ray.actor.exit_actor()

    def rlprof_start_finish_hook(self, command: str, node_env: Mapping[str, str]) -> None:
        """Start ``finish_hook_cmd`` for this worker's whole node (the controller picked this worker:
        :func:`~rlprof.integrations.nodes.finish_hook_runners`), in a background thread, with this
        rank's usual environment plus ``node_env``; returns at once, so training calls are not held up."""
        from rlprof.runtime.finish_hook import FinishHook

        prof = self.profiler
        config = prof.config.with_overrides(finish_hook_cmd=command, finish_hook_all_ranks=True)
        hook = FinishHook.for_process(config, prof.plan, prof.run)
        if hook is None:
            return
        hook.env.update(node_env)
        hook.synchronous = False
        self._rlprof_node_hook = hook
        hook.start()

    def rlprof_wait_finish_hook(self) -> int | None:
        """Wait for the node's finish hook (at most ``RLPROF_FINISH_HOOK_TIMEOUT`` s); its exit status."""
        hook = self._rlprof_node_hook
        if hook is None:
            return None
        hook.wait()
        return hook.returncode

    def _rlprof_reply(self, value: Any, send_manifest: bool) -> Any:
        if not send_manifest:
            return value
        path = self.profiler.manifest_path
        if path is None:
            return Sent(value, None)
        if self._rlprof_cursor is None or self._rlprof_cursor.path != path:
            self._rlprof_cursor = ManifestCursor(path)
        return Sent(value, batch_of(self.profiler, self._rlprof_cursor))


# ------------------------------------------------------------------------------ controller side


@dataclass(frozen=True)
class WorkerFailure:
    """A worker that did not answer an rlprof call: ``kind`` is ``died`` (the actor is gone),
    ``timeout`` (no answer within the timeout) or ``error`` (the call raised)."""

    worker: str
    rank: int
    call: str
    step: int | None
    kind: str
    error: str

    def __str__(self) -> str:
        when = f" at step {self.step}" if self.step is not None else ""
        return f"{self.worker} (rank {self.rank}) {self.kind} in {self.call}{when}: {self.error}"


@dataclass
class FanOut:
    """What one fan-out returned: results by worker label, the failures, the workers it did not
    wait for (dead or unresponsive since an earlier fan-out), how long it took."""

    call: str
    step: int | None
    results: dict[str, Any] = field(default_factory=dict)
    failures: list[WorkerFailure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


class ProfilingController:
    """The controller's side of profiling: decides per step, fans out, survives dead workers.

    :param config: the profiler configuration (YAML path, mapping, DictConfig, ProfilerConfig);
        loaded and checked once here, then shipped to the workers already parsed.
    :param workers: ``(WorkerSpec, actor handle)`` pairs; more can be added with :meth:`add`.
    :param run_id: shared by every rank; default: env ``RLPROF_RUN_ID`` or a new one
        (:func:`rlprof.runtime.run_id.run_id_for`).
    :param timeout_s: the longest any fan-out waits for a worker (``setup`` included, which also
        waits for the actors to start); may be changed between calls.
    """

    def __init__(
        self,
        config: Any,
        workers: Iterable[tuple[WorkerSpec, Any]] = (),
        *,
        run_id: str | None = None,
        overrides: Iterable[str] = (),
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.config: ProfilerConfig = load_config(config, overrides)
        self.run_id = run_id_for(run_id)  # decided as the workers' Profilers decide it
        self.timeout_s = timeout_s
        self.workers: dict[str, tuple[WorkerSpec, Any]] = {}
        self.failures: list[WorkerFailure] = []
        self.dead: set[str] = set()
        """Workers whose actor is gone: never called again."""
        self.unresponsive: dict[str, _Stuck] = {}
        """Workers that did not answer within the timeout: not waited for until their stuck call ends."""
        self._step: int | None = None
        self._last_step: int | None = None
        """The last profiled step whose ``step_boundary`` fan-out returned."""
        self._manifest = None
        self.placement: dict[str, NodeInfo] = {}
        """Ray node id -> the node's host and workers (from ``setup``'s replies)."""
        self.collector: RunCollector | None = None
        """Where the workers' manifest batches go (the controller's run directory); built at ``setup``."""
        self.gathered = None
        """What ``finalize`` gathered (``global_profiler.gather: traces``): a :class:`~rlprof.integrations.gather.Gathered`."""
        self._finals: dict[str, list[dict[str, Any]]] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        """Each worker's :meth:`ProfiledWorker.rlprof_info` from ``setup``."""
        g = self.config.global_
        self._hook_command = g.finish_hook_cmd if self.config.enabled and g.steps and not g.caller_steps else None
        """``finish_hook_cmd``, run by the controller's choice once per node (not by every worker)."""
        self._hook_runners: dict[str, dict[str, str]] = {}
        self._hooks_started: dict[str, Any] = {}
        self.finish_hooks: dict[str, int | None] = {}
        """After :meth:`finalize`: each node's finish hook exit status, by the worker that ran it."""
        self._profiled_steps = frozenset(self.config.global_.steps or ()) if self.config.enabled else frozenset()
        for spec, handle in workers:
            self.add(spec, handle)

    # ---------------------------------------------------------------- workers

    def add(self, spec: WorkerSpec, handle: Any) -> None:
        if spec.label in self.workers:
            raise ValueError(f"worker {spec.label} added twice")
        self.workers[spec.label] = (spec, handle)

    def worker_options(self, spec: WorkerSpec, *, runtime_env: Mapping[str, Any] | None = None,
                       backends: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """:func:`worker_options` for ``spec`` with this controller's config and run id."""
        return worker_options(self.config, **spec.profiler_kwargs(), run_id=self.run_id,
                              runtime_env=runtime_env, backends=backends)

    @property
    def handles(self) -> list[Any]:
        """Handles of the workers still alive, in the order they were added."""
        return [handle for label, (_, handle) in self.workers.items() if label not in self.dead]

    # ---------------------------------------------------------------- the fan-outs

    def profiles(self, step: int) -> bool:
        """Whether ``step`` is profiled anywhere (a set lookup: call it every step)."""
        return step in self._profiled_steps

    def setup(self, *, backends: Mapping[str, Any] | None = None) -> FanOut:
        """Have every worker build its Profiler (:meth:`ProfiledWorker.rlprof_setup`)."""
        if self.collector is None and self.config.enabled:
            self.collector = RunCollector(self.run_dir, current_node())
        shipped = self.config.with_overrides(finish_hook_cmd=None) if self._hook_command else self.config
        result = self._fan_out("setup", None, lambda spec, handle: handle.rlprof_setup.remote(
            shipped, run_id=self.run_id, backends=backends, send_manifest=True, **spec.profiler_kwargs()))
        for label, info in result.results.items():
            if isinstance(info, Mapping):
                self.infos[label] = dict(info)
                node = info.get("node")
                if node:
                    self.placement.setdefault(node, NodeInfo(node, str(info.get("host")))).workers.append(label)
        if self._hook_command:
            self._hook_runners = finish_hook_runners(self.config, self.workers, self.infos)
        return result

    @property
    def run_dir(self):
        """The controller's run directory: every node's manifest records end up here."""
        return Path(self.config.global_.save_path).absolute() / self.run_id

    def start_step(self, step: int) -> FanOut:
        """Step ``step`` begins; a no-op (no remote call) unless it is profiled."""
        if self._step is not None:
            self.step_boundary()
        if not self.profiles(step):
            return FanOut("start_step", step)
        self._step = step
        return self._fan_out("start_step", step, lambda spec, handle: handle.rlprof_start_step.remote(step))

    def step_boundary(self) -> FanOut:
        """The step begun by :meth:`start_step` ends (captures close, traces are written)."""
        step, self._step = self._step, None
        if step is None:
            return FanOut("step_boundary", None)
        result = self._fan_out("step_boundary", step,
                               lambda spec, handle: handle.rlprof_step_boundary.remote(send_manifest=True))
        self._last_step = step
        if self._hook_runners and step == max(self._profiled_steps):
            self._start_finish_hooks()
        return result

    def _wait_finish_hooks(self) -> dict[str, int | None]:
        """Each node's finish hook exit status by the worker that ran it (None: it did not answer)."""
        import ray

        refs = {}
        for label in self._hooks_started:
            if label not in self.dead:
                try:
                    refs[self.workers[label][1].rlprof_wait_finish_hook.remote()] = label
                except Exception:  # the worker is gone: nothing to wait for
                    pass
        from rlprof.runtime.finish_hook import wait_limit_s

        timeout = wait_limit_s() + self.timeout_s
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout) if refs else ([], [])
        status: dict[str, int | None] = dict.fromkeys(refs.values())
        for ref in ready:
            try:
                status[refs[ref]] = ray.get(ref)
            except Exception as exc:
                log.error("rlprof: the finish hook on %s: %s", refs[ref], describe_error(exc))
        return status

    def _start_finish_hooks(self) -> None:
        """After the last profiled step's captures are written on every node: the finish hook on one
        worker per node, not waited for (training goes on); :meth:`finalize` waits."""
        for label, node_env in self._hook_runners.items():
            if label in self.dead or label in self._hooks_started:
                continue
            handle = self.workers[label][1]
            try:
                self._hooks_started[label] = handle.rlprof_start_finish_hook.remote(self._hook_command, node_env)
            except Exception as exc:
                log.error("rlprof: could not start the finish hook on %s: %s", label, describe_error(exc))

    def finalize(self, reason: str = "end") -> FanOut:
        """End the run on every live worker; ``results`` holds each worker's artifact records."""
        if self._step is not None:
            self.step_boundary()
        result = self._fan_out("finalize", None,
                               lambda spec, handle: handle.rlprof_finalize.remote(reason, send_manifest=True))
        if self._hooks_started:
            self.finish_hooks = self._wait_finish_hooks()
        if self.config.enabled and self.config.global_.gather == "traces":
            from rlprof.integrations.gather import gather_traces, worker_sources

            self.gathered = gather_traces(self, worker_sources(self, result))
        self._finals = {label: records for label, records in result.results.items() if isinstance(records, list)}
        return result

    @property
    def pending(self) -> dict[str, list[dict[str, Any]]]:
        """After :meth:`finalize`: the artifacts each worker listed as ``pending`` (a tool writes them
        when the process exits, e.g. nsys with ``capture-range-end=repeat``), by worker label."""
        found = {label: [r for r in records if isinstance(r, dict) and r.get("kind") == "pending"]
                 for label, records in self._finals.items()}
        return {label: records for label, records in found.items() if records}

    def exit_workers(self, timeout_s: float | None = None) -> None:
        """Ask every live worker's process to exit (:meth:`ProfiledWorker.rlprof_exit`) and wait, at most
        ``timeout_s``, for them to be gone: what tools write at exit is then written."""
        import ray

        refs = []
        for handle in self.handles:
            try:
                refs.append(handle.rlprof_exit.remote())
            except Exception:
                pass
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=self.timeout_s if timeout_s is None else timeout_s)

    def after_exit(self, timeout_s: float = 120.0) -> None:
        """Once the workers have exited (:meth:`exit_workers`, or the trainer ended them): move what
        tools wrote at exit into the run on each node, add those records to the controller's run
        directory, and with ``gather: traces`` stream those files too
        (:mod:`rlprof.integrations.after_exit`). Does nothing when no worker listed a pending file."""
        import ray

        from rlprof.integrations.after_exit import NodeAgent
        from rlprof.integrations.gather import Source, gather_traces, gathered_paths
        from rlprof.integrations.nodes import ManifestBatch, pinned

        groups: dict[tuple[str | None, str], list[str]] = {}
        for label in self.pending:
            info = self.infos.get(label) or {}
            if info.get("run_dir") and info.get("manifest"):
                groups.setdefault((info.get("node"), info["run_dir"]), []).append(label)
        agents, asked = [], {}
        tools = list(self.config.global_.tools)
        for (node, run_dir), labels in groups.items():
            agent = ray.remote(NodeAgent).options(num_cpus=0, **(pinned(node) if node else {})).remote(run_dir)
            agents.append(agent)
            offsets = {self.infos[l]["manifest"]: self.collector.received.get(self.infos[l]["manifest"], 0)
                       if self.collector is not None else 0 for l in labels}
            asked[agent.after_exit.remote(tools, [int(self.infos[l]["pid"]) for l in labels], offsets, timeout_s)] = \
                (agent, node, run_dir, labels)
        sources = []
        ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=timeout_s + self.timeout_s) if asked else ([], [])
        for ref in ready:
            agent, node, run_dir, labels = asked[ref]
            try:
                gained = ray.get(ref)
            except Exception as exc:
                log.error("rlprof: the after-exit step on node %s failed: %s", short_node(node), describe_error(exc))
                continue
            moved = []
            for label in labels:
                info = self.infos[label]
                offset, lines = gained.get(info["manifest"], (0, b""))
                if lines and self.collector is not None:
                    self.collector.receive(ManifestBatch(
                        name=os.path.basename(info["manifest"]), path=info["manifest"], node=node, host=info["host"],
                        run=self.run_id, rank=info["rank"], pid=info["pid"], run_dir=run_dir, offset=offset, lines=lines))
                moved += _artifacts_in(lines)
            if self.config.global_.gather == "traces" and self.collector is not None \
                    and not any(self.infos[l]["manifest"] in self.collector.visible for l in labels):
                sources.append(Source(agent, node, Path(run_dir), gathered_paths(moved)))
        if sources:
            self.gathered = gather_traces(self, sources, self.gathered)
        for agent in agents:
            ray.kill(agent)

    def _fan_out(self, call: str, step: int | None, submit) -> FanOut:
        import ray

        started = time.perf_counter()
        result = FanOut(call, step)
        if self.unresponsive:
            self._readmit(ray)
        pending: dict[Any, str] = {}
        for label, (spec, handle) in self.workers.items():
            if label in self.dead:
                continue
            stuck = self.unresponsive.get(label)
            if stuck is not None:
                self._skip(result, label, stuck)
                if call == "finalize":
                    _send_without_waiting(submit, spec, handle)  # queued behind the stuck call
                continue
            try:
                pending[submit(spec, handle)] = label
            except Exception as exc:  # e.g. the handle's actor is known dead
                self._fail(result, label, "died", exc)
        ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=self.timeout_s) if pending else ([], [])
        for ref in ready:
            label = pending[ref]
            try:
                result.results[label] = self._received(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                self._fail(result, label, "died", exc)
            except Exception as exc:
                self._fail(result, label, "error", exc)
        for ref in not_ready:
            label = pending[ref]
            failure = self._fail(result, label, "timeout", TimeoutError(f"no answer within {self.timeout_s:g} s"))
            self.unresponsive[label] = _Stuck(ref, failure, time.monotonic())
        result.seconds = time.perf_counter() - started
        return result

    def _received(self, value: Any) -> Any:
        """A worker's reply without the manifest batch riding on it (handed to the collector)."""
        if not isinstance(value, Sent):
            return value
        if value.batch is not None and self.collector is not None:
            self.collector.receive(value.batch)
        return value.value

    def _readmit(self, ray) -> None:
        """Workers whose stuck call has ended answer again: take them back (one ``ray.wait`` that
        does not wait, for all of them)."""
        refs = {stuck.ref: label for label, stuck in self.unresponsive.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            label = refs[ref]
            stuck = self.unresponsive.pop(label)
            try:
                self._received(ray.get(ref, timeout=0))  # the manifest lines its late reply carries
            except Exception:  # the late call raised: nothing rode on it
                pass
            log.warning("rlprof: worker %s answered again %.1f s after it stopped answering (%s); the controller "
                        "waits for it again", label, time.monotonic() - stuck.since, stuck.failure.call)

    def _skip(self, result: FanOut, label: str, stuck: "_Stuck") -> None:
        result.skipped.append(label)
        if not stuck.said:
            stuck.said = True
            failure = stuck.failure
            when = f" at step {failure.step}" if failure.step is not None else ""
            log.warning("rlprof: not waiting for worker %s (rank %d) in %s or later calls: it has not answered "
                        "%s%s for %.0f s", label, failure.rank, result.call, failure.call, when,
                        time.monotonic() - stuck.since + self.timeout_s)

    # ---------------------------------------------------------------- failures

    def _fail(self, result: FanOut, label: str, kind: str, exc: BaseException) -> WorkerFailure:
        spec = self.workers[label][0]
        failure = WorkerFailure(worker=label, rank=spec.rank, call=result.call, step=result.step, kind=kind,
                                error=describe_error(exc))
        if kind == "died":
            self.dead.add(label)
            self.unresponsive.pop(label, None)
            self._check_node(label)
        result.failures.append(failure)
        self.failures.append(failure)
        if kind == "error":
            log.error("rlprof: worker %s", failure)
        else:
            log.error("rlprof: worker %s; the controller goes on without it and does not wait for it again", failure)
        self._record(failure)
        return failure

    def _check_node(self, label: str) -> None:
        """A worker died: if its Ray node is gone, say once that the node was lost (and which workers
        it took), in the log and the run's manifest. Its records up to its last step are already here."""
        where = next((info for info in self.placement.values() if label in info.workers), None)
        if where is None or where.lost_at_step is not None or _node_alive(where.node):
            return
        where.lost_at_step = self._last_step if self._last_step is not None else 0
        log.error("rlprof: node %s (%s) was lost with workers %s; its records up to step %s are in %s",
                  short_node(where.node), where.host, ", ".join(where.workers), where.lost_at_step, self.run_dir)
        self.write(NODE_LOST_RECORD, node=where.node, node_host=where.host, workers=list(where.workers),
                   step=self._last_step)

    def _record(self, failure: WorkerFailure) -> None:
        """Append the failure to the run's manifest so ``rlprof report`` shows it next to the artifacts."""
        self.write(FAILURE_RECORD, worker=failure.worker, worker_rank=failure.rank, call=failure.call,
                   step=failure.step, kind=failure.kind, error=failure.error)

    def write(self, record_type: str, **fields: Any) -> None:
        """Append one record to the controller's own manifest (``manifest/controller-<host>-<pid>.jsonl``)."""
        if not self.config.enabled:
            return
        if self._manifest is None:
            from rlprof.manifest import ManifestWriter

            host, pid, run_dir = hostname(), os.getpid(), self.run_dir
            self._manifest = ManifestWriter(run_dir / "manifest" / f"controller-{host}-{pid}.jsonl",
                                            {"run": self.run_id, "rank": None, "host": host, "pid": pid},
                                            root=run_dir)  # no link followed from the run directory down
        self._manifest.write(record_type, **fields)


@dataclass
class _Stuck:
    """A worker that did not answer ``failure.call`` in time: the call's ref (done = it answers again)."""

    ref: Any
    failure: WorkerFailure
    since: float
    said: bool = False


def _artifacts_in(lines: bytes) -> list[dict[str, Any]]:
    """The ``artifact`` records among manifest lines."""
    import json

    found = []
    for line in lines.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") == "artifact":
            found.append(record)
    return found


def _node_alive(node: str) -> bool:
    """Whether Ray still lists ``node`` as alive (asked only when a worker died)."""
    try:
        import ray

        return any(n.get("NodeID") == node and n.get("Alive") for n in ray.nodes())
    except Exception:  # cannot tell: do not claim a loss
        return True


def _send_without_waiting(submit, spec: WorkerSpec, handle: Any) -> None:
    try:
        submit(spec, handle)
    except Exception:  # the actor may be gone by now: nothing to tell it
        pass


def describe_error(exc: BaseException) -> str:
    """A short, single-line description: the task's own exception when Ray wrapped one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."
