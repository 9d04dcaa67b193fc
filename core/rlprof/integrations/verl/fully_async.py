"""verl's fully async trainer (``verl.experimental.fully_async_policy``) under the drop-in: parameter versions.

There a step is a parameter version (docs/analysis.md, "Async overlap"): the trainer's step N
(verl's ``global_steps`` N, ``current_param_version + 1`` as ``fit_step`` begins) makes version N, and a
rollout replica's step N runs from the weight sync that ends step N - 1 to the one that ends step N.
verl's fully async trainer tells its workers ``start_profile(profile_step=global_steps)`` on profiled
versions and the rollouter's replicas ``start_profile()`` / ``stop_profile()`` with no step, and never
says which step is the last. What the drop-in adds, wherever verl's modules are imported (:func:`watch`):

* **the replica's step**: before each weight sync (``FullyAsyncTrainer._fit_update_weights``, which stops
  the replicas' profiling, syncs, then starts it for the next version) the trainer publishes the
  version the replicas generate for next, ``current_param_version + 1``
  (:func:`rlprof.integrations.verl.run_signals.publish_step`), which a replica's ``start()`` reads;
* **the drivers' regions**, each in its actor's own process, by a profiler that records and captures
  nothing (:class:`DriverProfiler`, rank 0 of its role): the ``FullyAsyncTrainer``'s ``actor_wait_samples``
  (``_get_samples_from_queue``: the trainer waiting on verl's message queue) inside the version's step
  (``fit_step``, profiled versions), and the ``FullyAsyncRollouter``'s ``rollout_held`` (its
  ``_resume_event`` waited on while clear: held at the staleness limit, :class:`HeldEvent`) inside its step,
  which follows the replicas' (from ``_start_profiling`` to the ``reset_staleness`` after the next sync);
* **the weight send** on the training workers: ``actor_weight_send`` around the worker's
  ``update_weights`` (``ActorRolloutRefWorker``: gathering the weights and sending them through the
  checkpoint engine until the replicas have them), in the worker's step;
* **staleness**, every version, profiled or not: a ``staleness`` record (:class:`rlprof.manifest.StalenessRecord`)
  of the samples the step trained on (verl's ``trajectory_param_versions``; the trainer of step N holds
  version N - 1, so a sample of version w is N - 1 - w behind), in the trainer's controller manifest;
* **every version's step metrics** (docs/analysis.md, issue 42's; profiled or not): the trainer's
  :class:`~rlprof.integrations.verl.trainer_steps.StepTimer` (the run's step book and its decider, as the
  synchronous trainer's) is told each version's window, from the ``fit_step`` that begins it to the end of the
  weight sync that ends it (``_fit_update_weights``); the drivers' regions are timed on every version, the
  workers' and the replica's request records reach the book as in the synchronous trainer, and verl's logger
  gets the ``rlprof/`` figures with the version's aggregated metrics (logged after that sync);
* **unplanned captures** (``rlprof capture``, the triggers): before the weight sync that ends version N
  the decider is asked about version N + 1; a version it grants joins ``global_profiler.steps``, which verl
  reads there (to start the replicas' profiling for the next version) and in the next ``fit_step`` (to start
  the training workers'): one version captured on both sides, its reason told to every process first;
* **the end**: when the trainer's ``fit`` returns, the run's profiling is over
  (:func:`rlprof.integrations.verl.run_signals.finish_run`), waited for while verl's actors are still
  alive (Ray force-kills them once the task runner returns); the last versions' step metrics are written first.

The replicas' own regions (generating, paused for a sync, loading, resuming) are the server's:
:mod:`rlprof.integrations.verl.server_regions`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from typing import Any

from rlprof.integrations.verl import on_import, run_signals
from rlprof.integrations.verl.dist_profiler import DistProfiler
from rlprof.integrations.verl.sections import field

log = logging.getLogger("rlprof")

TRAINER_MODULE = "verl.experimental.fully_async_policy.fully_async_trainer"
TRAINER = "FullyAsyncTrainer"
ROLLOUTER_MODULE = "verl.experimental.fully_async_policy.fully_async_rollouter"
ROLLOUTER = "FullyAsyncRollouter"
WORKER_MODULE = "verl.workers.engine_workers"
WORKER = "ActorRolloutRefWorker"
STALENESS_SOURCE = "verl FullyAsyncTrainer trajectory_param_versions"
"""The ``source`` of the trainer's ``staleness`` records."""


def watch() -> None:
    """Patch verl's fully async trainer and the training worker once their modules are imported."""
    on_import.when_imported(TRAINER_MODULE, _patch_trainer)
    on_import.when_imported(ROLLOUTER_MODULE, _patch_rollouter)
    on_import.when_imported(WORKER_MODULE, _patch_worker)


def forget() -> None:
    """Leave them as verl wrote them (``rlprof.verl.uninstall``)."""
    for name, cls in ((TRAINER_MODULE, TRAINER), (ROLLOUTER_MODULE, ROLLOUTER), (WORKER_MODULE, WORKER)):
        on_import.forget(name)
        target = _actor_class(getattr(sys.modules.get(name), cls, None))
        for attr, value in list(vars(target).items()) if target is not None else ():
            if getattr(value, "rlprof_wrapped", False):
                setattr(target, attr, value.__wrapped__)


DRIVER_SKIP = {
    "actor": ("verl's FullyAsyncTrainer actor (the trainer's driver) records its own regions (actor_wait_samples) "
              "and captures nothing: its training workers capture"),
    "rollout": ("verl's FullyAsyncRollouter actor (the generation driver) records its own regions (rollout_held) "
                "and captures nothing: its replicas capture"),
}


class DriverProfiler(DistProfiler):
    """The profiler of a driver actor of verl's fully async run (rank 0 of its role: the ``FullyAsyncTrainer``
    for ``actor``, the ``FullyAsyncRollouter`` for ``rollout``): it records the driver's regions and steps;
    its backends capture nothing (the workers and replicas capture), each tool saying so once per capture."""

    def _backends(self, config: Any) -> Any:
        from rlprof.integrations.engines.stand_in import Inert

        return {tool: Inert(DRIVER_SKIP[self.role]) for tool in config.global_.tools}


def driver_profiler(driver: Any, role: str = "actor") -> DistProfiler | None:
    """The :class:`DriverProfiler` of ``driver`` (verl's trainer or rollouter actor), built at its first use from
    the role's profiler section; None when the role is not enabled or it cannot be built (logged: unprofiled)."""
    found = driver.__dict__.get("_rlprof_driver", False)
    if found is not False:
        return found
    profiler = None
    try:
        section = field(field(field(driver.config, "actor_rollout_ref"), role), "profiler")
        tool = field(field(driver.config, "global_profiler"), "tool")
        tool_config = (field(section, "tool_config") or {}).get(tool) if tool else None
        if section is not None and field(section, "enable", False):
            profiler = DriverProfiler(0, config=section, tool_config=tool_config, save_file_prefix=role)
    except Exception as exc:  # profiling must not stop training
        log.error("rlprof: verl's fully async %s driver's regions are not recorded: %s: %s", role, type(exc).__name__, exc)
    driver._rlprof_driver = profiler
    return profiler


def _profiled(trainer: Any, version: int) -> bool:
    steps = field(field(trainer.config, "global_profiler"), "steps")
    return steps is not None and version in list(steps)


def _wrap(cls: Any, name: str, make) -> None:
    original = getattr(cls, name, None)
    if original is None or getattr(original, "rlprof_wrapped", False):
        return
    wrapped = functools.wraps(original)(make(original))
    wrapped.rlprof_wrapped = True
    setattr(cls, name, wrapped)


def _actor_class(cls: Any) -> Any:
    """The class an actor process runs where verl decorated it with ``@ray.remote`` (``FullyAsyncTrainer``):
    Ray's modified subclass, which holds its own copy of every method (Ray's wrappers around the functions
    as they were when the class was decorated), so patching the class itself would change nothing there."""
    metadata = getattr(cls, "__ray_metadata__", None)
    return getattr(metadata, "modified_class", None) or cls


def _patch_trainer(module: Any) -> None:
    cls = _actor_class(getattr(module, TRAINER))

    def fit_step(original):
        async def fit_step(self, *args, **kwargs):
            version = self.current_param_version + 1
            profiled = _profiled(self, version)
            driver = driver_profiler(self)  # every version: its regions are timed, captured on profiled ones
            _version_began(self, version, profiled)
            if driver is not None and profiled:
                driver.start(profile_step=version)
            try:
                return await original(self, *args, **kwargs)
            finally:
                if driver is not None and profiled:
                    driver.stop(run_command=False)
        return fit_step

    def get_samples(original):
        async def _get_samples_from_queue(self, *args, **kwargs):
            driver = self.__dict__.get("_rlprof_driver")
            if driver is None or not driver._rlprof_enters:
                return await original(self, *args, **kwargs)
            with driver.profiler.unsampled_role("actor", "wait_samples"):
                return await original(self, *args, **kwargs)
        return _get_samples_from_queue

    def collect(original):
        def _collect_metrics_from_samples(self, batch, metrics):
            result = original(self, batch, metrics)
            try:
                _write_staleness(self, batch)
            except Exception as exc:  # a record lost, never the step
                log.error("rlprof: the fully async trainer's staleness was not recorded: %s: %s",
                          type(exc).__name__, exc)
            return result
        return _collect_metrics_from_samples

    def update_weights(original):
        async def _fit_update_weights(self, *args, **kwargs):
            from rlprof.integrations.verl.run_id import shared_run_id

            syncing = self.local_trigger_step == 1  # verl syncs (and starts the next version) only then
            if syncing:
                _decide_next(self, self.current_param_version + 1)
            shared = shared_run_id()
            if shared and _profiled(self, self.current_param_version + 1):
                from rlprof.runtime.run_id import run_id_for

                run_signals.publish_step(run_id_for(shared), self.current_param_version + 1)
            result = await original(self, *args, **kwargs)
            if syncing:
                _version_ended(self, self.current_param_version)
            return result
        return _fit_update_weights

    def fit(original):
        async def fit(self, *args, **kwargs):
            _watch_tracker(self)
            try:
                return await original(self, *args, **kwargs)
            finally:
                await asyncio.to_thread(_metrics_written)
                await asyncio.to_thread(_end_of_run)
        return fit

    _wrap(cls, "fit_step", fit_step)
    _wrap(cls, "_get_samples_from_queue", get_samples)
    _wrap(cls, "_collect_metrics_from_samples", collect)
    _wrap(cls, "_fit_update_weights", update_weights)
    _wrap(cls, "fit", fit)


def _version_began(trainer: Any, version: int, profiled: bool) -> None:
    """The trainer's first ``fit_step`` of ``version``: its window opens in the run's step book (see the module doc)."""
    from rlprof.integrations.verl.trainer_steps import StepTimer

    if trainer.__dict__.get("_rlprof_version") == version:  # a version of several fit_steps (trigger_parameter_sync_step)
        return
    try:
        trainer._rlprof_version = version
        StepTimer.of(trainer).begin(version, profiled)
    except Exception as exc:  # never the step's failure
        log_error("the fully async trainer's version was not timed", exc)


def _version_ended(trainer: Any, version: int) -> None:
    """The weight sync that ends ``version`` returned: its window closes."""
    from rlprof.integrations.verl.trainer_steps import StepTimer

    if trainer.__dict__.pop("_rlprof_version", None) != version:
        return
    try:
        StepTimer.of(trainer).end(version)
    except Exception as exc:
        log_error("the fully async trainer's version was not timed", exc)


def _decide_next(trainer: Any, version: int) -> None:
    """Before the sync that starts ``version``: an unplanned capture of it (``rlprof capture``, a trigger) joins
    verl's ``global_profiler.steps``, which verl reads to profile the replicas from this sync on and the training
    workers in its ``fit_step``."""
    from rlprof.integrations.verl.trainer_steps import StepTimer

    if _profiled(trainer, version):
        return
    try:
        if not StepTimer.of(trainer).unplanned(version):
            return
        section = field(trainer.config, "global_profiler")
        steps = list(field(section, "steps") or ())
        section.steps = sorted({*map(int, steps), version})
    except Exception as exc:  # the capture is lost, never the run
        log_error(f"the capture of version {version} could not be started", exc)


def _metrics_written() -> None:
    """The trainer's ``fit`` returned: the last versions' step metrics are taken and written, the book closed."""
    from rlprof.integrations.verl import step_metrics

    metrics, step_metrics.ACTIVE = step_metrics.ACTIVE, None
    if metrics is not None:
        try:
            metrics.close()
        except Exception as exc:
            log_error("the fully async run's last step metrics were not written", exc)


def _write_staleness(trainer: Any, batch: Any) -> None:
    """The ``staleness`` record of the step being trained (see the module doc)."""
    from rlprof.integrations.verl.trainer_steps import StepTimer
    from rlprof.manifest import STALENESS_RECORD, StalenessRecord, record_fields

    versions = [int(v) for v in (getattr(batch, "meta_info", None) or {}).get("trajectory_param_versions", ())]
    if not versions:
        return
    held = trainer.current_param_version
    record = StalenessRecord.of(held + 1, [held - v for v in versions], STALENESS_SOURCE)
    StepTimer.of(trainer).write(STALENESS_RECORD, **record_fields(record))


ROLLOUTER_IDLE, TRAINER_IDLE = "fully_async/rollouter/idle_ratio", "fully_async/trainer/idle_ratio"


def _write_idle(trainer: Any, data: Any, step: Any) -> None:
    """verl's own idle figures, as its trainer logs them to its tracker (docs/verl.md, "Fully async"): the
    rollouter's at each sync (``step`` = the version the sync made, whose generation window it describes),
    the trainer's with the next version's metrics (``training/global_step`` names the step it describes)."""
    from rlprof.integrations.verl.trainer_steps import StepTimer
    from rlprof.manifest import FRAMEWORK_IDLE_RECORD, FrameworkIdleRecord, record_fields

    if not isinstance(data, dict):
        return
    found = []
    if ROLLOUTER_IDLE in data and isinstance(step, int) and step > 0:
        found.append(FrameworkIdleRecord(step=step, side="rollouter", idle_ratio=float(data[ROLLOUTER_IDLE]),
                                         window_s=_float(data.get("fully_async/rollouter/version_time")),
                                         metric=ROLLOUTER_IDLE))
    if TRAINER_IDLE in data and data.get("training/global_step") is not None:
        found.append(FrameworkIdleRecord(step=int(data["training/global_step"]), side="trainer",
                                         idle_ratio=float(data[TRAINER_IDLE]), window_s=_float(data.get("timing_s/step")),
                                         metric=TRAINER_IDLE))
    for record in found:
        StepTimer.of(trainer).write(FRAMEWORK_IDLE_RECORD, **record_fields(record))


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _watch_tracker(trainer: Any) -> None:
    """Read what the trainer logs to its tracker (``self.logger.log``), for :func:`_write_idle`; once."""
    tracker = getattr(trainer, "logger", None)
    original = getattr(tracker, "log", None)
    if original is None or getattr(original, "rlprof_idle_wrapped", False):  # its own mark: the class's log is
        return  # wrapped too (step metrics), and a bound method shows its function's attributes

    def logged(*args: Any, **kwargs: Any) -> Any:
        try:
            _write_idle(trainer, kwargs.get("data", args[0] if args else None),
                        kwargs.get("step", args[1] if len(args) > 1 else None))
        except Exception as exc:  # a record lost, never the tracker's line
            log_error("verl's idle figures were not recorded", exc)
        return original(*args, **kwargs)

    logged.rlprof_idle_wrapped = True
    tracker.log = logged


def log_error(what: str, exc: BaseException) -> None:
    log.error("rlprof: %s: %s: %s", what, type(exc).__name__, exc)


def _end_of_run() -> None:
    """The trainer's ``fit`` returned: every profiling process of the run finalizes now, while the actors live."""
    from rlprof.integrations.verl.run_id import shared_run_id
    from rlprof.runtime.run_id import run_id_for

    shared = shared_run_id()
    if shared:
        run_signals.finish_run([run_id_for(shared)])


class HeldEvent(asyncio.Event):
    """The rollouter's ``_resume_event``: a wait on it while it is clear is the rollouter held (at the staleness
    limit or paused: ``_processor_worker`` drains its requests in flight, then blocks until ``reset_staleness``
    or its monitor sets it), timed as ``rollout_held`` on its profiled steps."""

    def __init__(self, rollouter: Any):
        super().__init__()
        self._rollouter = rollouter

    async def wait(self) -> bool:
        driver = self._rollouter.__dict__.get("_rlprof_driver")
        if self.is_set() or driver is None or not driver._rlprof_enters:
            return await super().wait()
        with driver.profiler.unsampled_role("rollout", "held"):
            return await super().wait()


def _patch_rollouter(module: Any) -> None:
    """The generation driver's step follows the replicas' (started with them, ended after the sync that ends
    the version: ``reset_staleness``), and its holds are ``rollout_held``."""
    cls = _actor_class(getattr(module, ROLLOUTER))

    def init_async(original):
        def _init_async_objects(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            driver_profiler(self, "rollout")  # its holds are timed on every version, captured on profiled ones
            held = HeldEvent(self)
            if self._resume_event.is_set():
                held.set()
            self._resume_event = held
            return result
        return _init_async_objects

    def start(original):
        async def _start_profiling(self, *args, **kwargs):
            from rlprof.integrations.verl.run_id import shared_run_id
            from rlprof.runtime.run_id import run_id_for

            driver = driver_profiler(self, "rollout")
            shared = shared_run_id()
            step = run_signals.current_step(run_id_for(shared)) if shared else None
            if driver is not None and step is not None:
                driver.start(profile_step=step)
            return await original(self, *args, **kwargs)
        return _start_profiling

    def stop(original):
        async def _stop_profiling(self, *args, **kwargs):
            self._rlprof_stop_due = True  # after the sync that follows, as the replicas' step
            return await original(self, *args, **kwargs)
        return _stop_profiling

    def reset(original):
        async def reset_staleness(self, *args, **kwargs):
            result = await original(self, *args, **kwargs)
            driver = self.__dict__.get("_rlprof_driver")
            if self.__dict__.pop("_rlprof_stop_due", False) and driver is not None:
                for _ in range(3):  # the held wait this reset ended leaves its region first
                    await asyncio.sleep(0)
                driver.stop(run_command=False)
            return result
        return reset_staleness

    _wrap(cls, "_init_async_objects", init_async)
    _wrap(cls, "_start_profiling", start)
    _wrap(cls, "_stop_profiling", stop)
    _wrap(cls, "reset_staleness", reset)


def _patch_worker(module: Any) -> None:
    cls = getattr(module, WORKER, None)
    if cls is None:
        return

    def update_weights(original):
        async def update_weights(self, *args, **kwargs):
            profiler = getattr(self, "profiler", None)
            if getattr(profiler, "_rlprof_live", False) is not True:
                return await original(self, *args, **kwargs)
            with profiler.profiler.unsampled_role("actor", "weight_send"):
                return await original(self, *args, **kwargs)
        return update_weights

    _wrap(cls, "update_weights", update_weights)
