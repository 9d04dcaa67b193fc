"""Before a worker exists: who it is, and the ``.options(...)`` it is created with.

The controller knows each worker actor before Ray creates it: its :class:`WorkerSpec` (the
:class:`ProfilerArgs` its Profiler is built with, and its group). :func:`worker_options` resolves that
worker's plan on the controller, so a backend that must start *with* the process (nsys) can add to
its ``runtime_env``, and the run id reaches the worker's environment as ``RLPROF_RUN_ID``.

The Profiler's placement arguments (rank, world size, roles, stages, replica) are stated once, in
:class:`ProfilerArgs`: :func:`worker_options`, :meth:`~rlprof.integrations.ray_worker.ProfiledWorker.rlprof_setup`
and the controller all take or pass exactly those, and a test keeps them equal to
:class:`~rlprof.Profiler`'s own parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from rlprof.config.schema import load_config
from rlprof.context import RuntimeEnvContext
from rlprof.errors import BackendError
from rlprof.runtime.plan import primary_role, resolve_plan
from rlprof.runtime.run_id import RUN_ID_ENV

HYBRID_ENGINE_STAGES: Mapping[str, tuple[str, ...]] = {
    "rollout": ("generate",),
    "ref": ("compute_log_prob",),
    "actor": ("compute_log_prob", "update"),
}
"""The regions a verl hybrid-engine worker (actor+rollout+ref in one process) runs every step, in
order. Pass it as ``stages`` so the plan can count discrete captures exactly."""


@dataclass(frozen=True)
class ProfilerArgs:
    """Where one process's :class:`~rlprof.Profiler` stands in the run: the arguments it is built
    with besides its config and run id (see the Profiler for each). Stated here once; everything
    that hands them on takes or passes these (:meth:`profiler_kwargs`)."""

    rank: int
    world_size: int
    roles: tuple[str, ...]
    stages: Mapping[str, Sequence[str]] | None = None
    replica_rank: int | None = None
    num_replicas: int | None = None

    def profiler_kwargs(self) -> dict[str, Any]:
        """The keyword arguments :class:`~rlprof.Profiler`, :func:`worker_options` and
        ``rlprof_setup`` take (``roles`` as a tuple)."""
        kwargs = {f.name: getattr(self, f.name) for f in fields(ProfilerArgs)}
        kwargs["roles"] = tuple(self.roles)
        return kwargs


@dataclass(frozen=True)
class WorkerSpec(ProfilerArgs):
    """Who one worker actor is: its :class:`ProfilerArgs` and its ``group``, which names the worker
    group (``actor_rollout_ref``, ``critic``...) so that rank 0 of two groups stay apart in reports.
    """

    group: str = "workers"

    @property
    def label(self) -> str:
        return f"{self.group}/rank{self.rank}"


def worker_options(
    config: Any,
    *place: Any,
    run_id: str | None = None,
    runtime_env: Mapping[str, Any] | None = None,
    backends: Mapping[str, Any] | None = None,
    **named: Any,
) -> dict[str, Any]:
    """``.options(**worker_options(config, rank, world_size, roles, stages, ...))`` for the actor that
    will be ``rank`` hosting ``roles``; ``place`` and ``named`` are :class:`ProfilerArgs`.

    Called on the controller before the actor is created. Resolves that worker's plan, loads the
    selected backends and merges their ``worker_runtime_env`` contributions into ``runtime_env``
    (given ``stages``, the plan knows exactly how many captures the worker opens, which nsys needs).
    ``run_id`` is handed to the worker as ``RLPROF_RUN_ID`` so a Profiler the worker builds itself
    joins the controller's run. ``backends`` (``{name: instance}``) replaces entry points, as in
    :class:`~rlprof.Profiler`, for tests.

    :raises rlprof.ConfigError: the worker's plan is invalid, or two backends set the same
        runtime_env key to different values.
    """
    args = ProfilerArgs(*place, **named)
    cfg = load_config(config)
    plan = resolve_plan(cfg, rank=args.rank, world_size=args.world_size, roles=tuple(args.roles),
                        replica_rank=args.replica_rank, num_replicas=args.num_replicas)
    env: dict[str, Any] = _merged({}, dict(runtime_env or {}), "runtime_env")
    if run_id:
        env = _merged(env, {"env_vars": {RUN_ID_ENV: run_id}}, "run_id")
    if plan.active:
        from rlprof.runtime.registry import Backends

        registry = Backends(plan.tools, rank=args.rank, instances=backends)
        if registry.has("worker_runtime_env"):
            expected = plan.expected_captures(args.stages)
            role = primary_role(plan)
            for name in plan.tools:
                ctx = RuntimeEnvContext(
                    backend=name, tool_config=registry.validated_tool_config(name, cfg.roles[role]),
                    rank=args.rank, world_size=args.world_size, roles=tuple(args.roles),
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
