"""verl's vLLM rollout server under rlprof: the engine's own profiler, driven by the replica's participant.

In agent-loop mode verl's ``vLLMHttpServer`` (``verl.workers.rollout.vllm_rollout.vllm_async_server``)
drives vLLM's profiler itself, at three sites (docs/engines-vllm-notes.md, "verl 0.9.1's vLLM path"):

* ``launch_server`` asks ``_should_profile()`` and merges ``build_vllm_profiler_args(...)`` — a
  ``profiler_config`` with ``torch_profiler_dir=<save_path>/agent_loop_rollout_replica_<r>`` and the
  token window — into the engine's arguments;
* ``start_profile()`` awaits ``engine.start_profile()`` (verl's trainer passes no step);
* ``stop_profile()`` awaits ``engine.stop_profile()``, then ``relocate_rollout_traces`` moves the
  replica's folder to ``save_path/rollout-replica<r>_<name>`` when ``relocate_results`` is set.

When the drop-in is switched on, :func:`patch` makes the server's ``profiler_controller`` rlprof's
:class:`~rlprof.integrations.verl.rollout_profiler.RolloutDistProfiler` for the engine ``vllm`` (no
backend runs in the server's process: the engine stands in for it), and routes those sites through it
and through the replica participant it owns, :class:`rlprof.integrations.engines.replica.EngineReplica`:

* ``_should_profile()`` is the core's answer: this replica's engine is profiled at all (enable, replica
  ranks, discrete, a tool and steps set);
* the engine's ``profiler_config`` is the participant's (:meth:`RolloutDistProfiler.engine_kwargs`):
  its directory is inside rlprof's run directory, the window is rlprof's reading of
  ``profile_token_start``/``profile_token_end``;
* ``start_profile()``/``stop_profile()`` go through the participant, which files the step's capture
  under the step the trainer began (read from the run's signals), moves what the engine wrote into
  rlprof's layout and manifest with the ``replica_rank``, and records ``rollout_generate``; with a tool
  no engine stands in for (``nsys``: verl then builds the server's controller without a section, and
  rlprof reads the rollout's from the run's signals) the replica still records ``rollout_generate``
  and says, once, why its engine was not captured;
* nothing is relocated: there is no per-replica folder beside the run;
* **every request is a record** (docs/engines.md, "Request records"), on every replica, every step, profiled or
  not, where the rollout is timed: ``launch_server`` builds the engine with per-request stats kept
  (``build_cli_args_from_config`` gets the adapter's ``request_kwargs()``: log stats on, which verl's
  ``disable_log_stats`` default turns off), and each finished output of the engine's ``generate`` becomes a
  record through the vLLM adapter (:meth:`RolloutDistProfiler.served`), of the step the server's weights serve
  (its ``global_steps``, the parameter version, plus one), before verl's ``generate`` returns.

A server whose controller is verl's own (rlprof switched off in that process) runs verl's code
unchanged: every patched method checks the controller first. The patch reaches the module when it is
imported (:mod:`rlprof.integrations.verl.on_import`), so switching rlprof on never imports vLLM.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
from typing import Any

log = logging.getLogger("rlprof")

MODULE = "verl.workers.rollout.vllm_rollout.vllm_async_server"
SERVER = "vLLMHttpServer"
ENGINE = "vllm"
"""The engine adapter's name (entry-point group ``rlprof.engines``)."""
METHODS = ("_should_profile", "launch_server", "start_profile", "stop_profile")
"""The server's methods :func:`patch` wraps; each falls back to verl's when the controller is not rlprof's (and the
module's ``build_vllm_profiler_args``, ``build_rollout_dist_profiler`` and ``build_cli_args_from_config``)."""

_launching: contextvars.ContextVar = contextvars.ContextVar("rlprof_vllm_launching", default=None)
"""The participant of the server whose ``launch_server`` is running in this task: verl calls
``build_vllm_profiler_args`` from there with the controller's config, and nothing else identifies the server."""


def watch() -> None:
    """Patch verl's vLLM server module now if it is loaded, else right after it is imported."""
    from rlprof.integrations.verl.on_import import when_imported

    when_imported(MODULE, patch)


def patch(module: Any) -> None:
    """Route ``module.vLLMHttpServer`` (and the module's ``build_vllm_profiler_args`` and
    ``build_rollout_dist_profiler``, which its methods call) through rlprof.

    Idempotent. Subclasses that do not override the methods inherit the routing."""
    server = getattr(module, SERVER, None)
    if server is None or "_rlprof_originals" in vars(server):
        return
    originals = {name: vars(server)[name] for name in METHODS}
    originals["build_vllm_profiler_args"] = module.build_vllm_profiler_args
    originals["build_rollout_dist_profiler"] = module.build_rollout_dist_profiler
    originals["build_cli_args_from_config"] = module.build_cli_args_from_config
    wrappers = {
        "_should_profile": _should_profile(originals["_should_profile"]),
        "launch_server": _launch_server(originals["launch_server"]),
        "start_profile": _start_profile(originals["start_profile"]),
        "stop_profile": _stop_profile(originals["stop_profile"]),
    }
    for name, wrapper in wrappers.items():
        setattr(server, name, wrapper)
    server._rlprof_originals = originals
    module.build_vllm_profiler_args = _profiler_args(originals["build_vllm_profiler_args"])
    module.build_rollout_dist_profiler = _rollout_profiler(originals["build_rollout_dist_profiler"])
    module.build_cli_args_from_config = _cli_args(originals["build_cli_args_from_config"])


def unpatch(module: Any) -> None:
    """Put verl's methods back (``rlprof.verl.uninstall``)."""
    server = getattr(module, SERVER, None)
    originals = vars(server).get("_rlprof_originals") if server is not None else None
    if not originals:
        return
    for name in METHODS:
        setattr(server, name, originals[name])
    module.build_vllm_profiler_args = originals["build_vllm_profiler_args"]
    module.build_rollout_dist_profiler = originals["build_rollout_dist_profiler"]
    module.build_cli_args_from_config = originals["build_cli_args_from_config"]
    del server._rlprof_originals


def participant(server: Any):
    """The server's rlprof participant (its ``profiler_controller`` when that is rlprof's), else None."""
    from rlprof.integrations.verl.rollout_profiler import RolloutDistProfiler

    controller = getattr(server, "profiler_controller", None)
    return controller if isinstance(controller, RolloutDistProfiler) else None


def _rollout_profiler(original):
    """The server's ``__init__`` builds its controller with this: rlprof's, told that vLLM generates."""
    from rlprof.integrations.verl.rollout_profiler import build_rollout_dist_profiler as ours

    @functools.wraps(original)
    def build_rollout_dist_profiler(replica_rank, replica_world_size, config=None, tool_config=None):
        return ours(replica_rank, replica_world_size, config=config, tool_config=tool_config, engine=ENGINE)

    return build_rollout_dist_profiler


def _should_profile(original):
    @functools.wraps(original)
    def should_profile(self) -> bool:
        replica = participant(self)
        if replica is None:
            return original(self)
        return replica.engine_profiled()

    return should_profile


def _launch_server(original):
    @functools.wraps(original)
    async def launch_server(self, *args, **kwargs):
        replica = participant(self)
        token = _launching.set(replica)
        try:
            result = await original(self, *args, **kwargs)
        finally:
            _launching.reset(token)
        engine = getattr(self, "engine", None)  # node 0's engine (the other nodes run headless)
        if replica is not None and engine is not None and replica.engine_requests() is not None:
            engine.generate = _recording(engine.generate, self, replica)
        return result

    return launch_server


def _cli_args(original):
    """The engine's arguments, as ``launch_server`` turns them into vLLM's command line: with the request stats the
    replica's records need (log stats on) wherever the rollout is timed, profiled or not."""
    @functools.wraps(original)
    def build_cli_args_from_config(config):
        replica = _launching.get()
        if replica is not None and isinstance(config, dict):
            config = {**config, **replica.request_kwargs()}
        return original(config)

    return build_cli_args_from_config


def _recording(generate, server, replica):
    """The engine's ``generate`` (an async generator of a request's outputs), its finished output a request record
    of the replica, handed on before the caller gets it. Closing it closes the engine's (vLLM aborts the request)."""
    @functools.wraps(generate)
    async def generate_recorded(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        try:
            async for output in outputs:
                if getattr(output, "finished", False):
                    try:
                        replica.served((output,), getattr(server, "global_steps", None))
                    except Exception as exc:  # the request's record is lost, never the request
                        log.debug("rlprof: a request record was lost: %s: %s", type(exc).__name__, exc)
                yield output
        finally:
            await outputs.aclose()

    generate_recorded.rlprof_recording = True
    return generate_recorded


def _profiler_args(original):
    @functools.wraps(original)
    def build_vllm_profiler_args(profiler_config, tool_config, rank, legacy_env: bool = True) -> dict:
        replica = _launching.get()
        if replica is None or replica.config is not profiler_config:
            return original(profiler_config, tool_config, rank, legacy_env=legacy_env)
        if legacy_env:  # vLLM < 0.13 reads VLLM_TORCH_PROFILER_* only: no per-replica config to hand it
            log.warning("rlprof: this vLLM takes its profiler settings from VLLM_TORCH_PROFILER_* only (before "
                        "0.13); rlprof drives vLLM >= 0.13's profiler_config, so replica %s is not profiled", rank)
            return {}
        kwargs = replica.engine_kwargs()
        return {key: json.dumps(dict(value)) if key == "profiler_config" else value for key, value in kwargs.items()}

    return build_vllm_profiler_args


def _start_profile(original):
    @functools.wraps(original)
    async def start_profile(self, **kwargs):
        replica = participant(self)
        if replica is None:
            return await original(self, **kwargs)
        if self.node_rank != 0:  # verl's rule: node 0 holds the engine
            return None
        await replica.start_engine(getattr(self, "engine", None), **kwargs)  # a server not launched has none

    return start_profile


def _stop_profile(original):
    @functools.wraps(original)
    async def stop_profile(self):
        replica = participant(self)
        if replica is None:
            return await original(self)
        if self.node_rank != 0:
            return None
        await replica.stop_engine(getattr(self, "engine", None))

    return stop_profile
