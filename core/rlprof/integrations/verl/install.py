"""The switch: verl runs with rlprof's profiler classes, without an edit of verl's source.

:func:`install` replaces ``DistProfiler``, ``DistProfilerExtension`` and
``build_rollout_dist_profiler`` in ``verl.utils.profiler`` (and in every verl module that already
imported them) with rlprof's, in the calling process, routes verl's vLLM rollout server through
rlprof when that module is imported (:mod:`rlprof.integrations.verl.vllm_server`), and sets ``RLPROF_VERL=1`` (plus a shared
``RLPROF_RUN_ID``) in its environment. Every Ray worker of a local cluster inherits that environment;
when such a process imports ``verl``, verl loads its ``verl.plugins`` entry points, where rlprof's
(:mod:`rlprof.verl.plugin`) calls :func:`install` before verl's worker modules are imported — so
the worker classes are built on rlprof's ``DistProfilerExtension`` and construct rlprof's
``DistProfiler``.

In the driver (a process that installs before it joins Ray), :func:`install` also registers the exit
callback that waits for every profiling process of the run to finalize before the job ends, then prints
where the profile is (:func:`rlprof.integrations.verl.run_signals.finish_at_exit`). In every process, it
times the trainer's unprofiled steps should the process run verl's trainer (``main_ppo`` runs it in a
``TaskRunner`` actor, not in the driver; :mod:`rlprof.integrations.verl.trainer_steps`), and hands rlprof's
own ``global_profiler`` keys from the trainer's config on to every worker
(:mod:`rlprof.integrations.verl.global_keys`).

Three ways to switch it on, all equivalent:

* ``python -m rlprof.verl verl.trainer.main_ppo <hydra overrides>`` (the module runner);
* ``import rlprof.verl; rlprof.verl.install()`` at the top of your own driver script;
* on a Ray cluster you started yourself (its workers do not inherit the driver's environment): the
  config line ``+ray_kwargs.ray_init.runtime_env.env_vars.RLPROF_VERL=1``.
"""

from __future__ import annotations

import os
import sys

ENABLE_ENV = "RLPROF_VERL"
NAMES = ("DistProfiler", "DistProfilerExtension", "build_rollout_dist_profiler")
_originals: dict[str, object] = {}


def install() -> None:
    """Swap verl's profiler classes for rlprof's in this process (idempotent; see the module doc)."""
    from rlprof.integrations.verl import (agent_loop, dist_profiler, extension, fully_async, global_keys, phases,
                                         rollout_profiler, run_signals, step_metrics, trainer_steps, vllm_server)
    from rlprof.runtime.run_id import export_run_id, in_ray

    os.environ[ENABLE_ENV] = "1"
    if not in_ray():  # a driver about to start Ray
        export_run_id()  # a local cluster's workers inherit it
        run_signals.finish_at_exit()  # the run's workers finalize before the job ends (they are force-killed then)
    trainer_steps.watch()  # where the trainer runs (verl's TaskRunner actor): its unprofiled steps, timed there
    global_keys.watch()  # where the trainer is built: rlprof's own global_profiler keys, handed on to every worker
    fully_async.watch()  # verl's fully async trainer: parameter versions, its waits and weight sends, the run's end
    agent_loop.watch()  # verl's agent loop: each sample's own metrics joined to its request's record
    import verl.utils.profiler as package
    import verl.utils.profiler.profile as module

    ours = {
        "DistProfiler": dist_profiler.DistProfiler,
        "DistProfilerExtension": extension.DistProfilerExtension,
        "build_rollout_dist_profiler": rollout_profiler.build_rollout_dist_profiler,
    }
    for name in NAMES:
        current = getattr(module, name)
        if current is not ours[name]:
            _originals.setdefault(name, current)
    originals = {id(obj): name for name, obj in _originals.items()}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "verl" or mod_name.startswith("verl.")):
            continue
        namespace = getattr(mod, "__dict__", {})
        for attr, value in list(namespace.items()):
            name = originals.get(id(value))
            if name is not None and attr == name:
                setattr(mod, attr, ours[name])
    for target in (module, package):
        for name in NAMES:
            setattr(target, name, ours[name])
    vllm_server.watch()  # verl's vLLM rollout server: patched when it is imported (never imported here)
    phases.watch()  # verl's trainer: its own phases (timing_s) on every step of a profiled run, for the report
    step_metrics.watch()  # verl's Tracking.log: every trainer.logger backend gets the rlprof/ step metrics


def installed() -> bool:
    """verl's profiler names resolve to rlprof's in this process."""
    mod = sys.modules.get("verl.utils.profiler.profile")
    if mod is None:
        return False
    from rlprof.integrations.verl.dist_profiler import DistProfiler

    return getattr(mod, "DistProfiler", None) is DistProfiler


def uninstall() -> None:
    """Put verl's own classes back (tests; a process that switches profilers twice)."""
    from rlprof.integrations.verl import (agent_loop, dist_profiler, extension, fully_async, global_keys, on_import,
                                         phases, rollout_profiler, step_metrics, trainer_steps, vllm_server)

    on_import.forget(vllm_server.MODULE)
    agent_loop.forget()
    trainer_steps.forget()
    fully_async.forget()
    step_metrics.forget()
    global_keys.forget()
    for name in phases.TRAINERS:
        on_import.forget(name)
        if name in sys.modules:
            phases.unpatch(sys.modules[name])
    if vllm_server.MODULE in sys.modules:
        vllm_server.unpatch(sys.modules[vllm_server.MODULE])
    if not _originals:
        return

    ours = {id(dist_profiler.DistProfiler): "DistProfiler", id(extension.DistProfilerExtension): "DistProfilerExtension",
            id(rollout_profiler.build_rollout_dist_profiler): "build_rollout_dist_profiler"}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "verl" or mod_name.startswith("verl.")):
            continue
        for attr, value in list(getattr(mod, "__dict__", {}).items()):
            name = ours.get(id(value))
            if name is not None and attr == name:
                setattr(mod, attr, _originals[name])
    os.environ.pop(ENABLE_ENV, None)


