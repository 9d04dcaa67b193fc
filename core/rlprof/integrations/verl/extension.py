"""``DistProfilerExtension``: the mixin verl's workers inherit for ``start_profile``/``stop_profile``/
``step_profile``, the methods verl's trainer calls on a whole worker group (``wg.start_profile(...)``).

verl's ``RayWorkerGroup`` only exposes worker methods marked by verl's ``@register``; each of these
three is registered ``Dispatch.ONE_TO_ALL`` (the same arguments to every rank), as in verl. The
decorator is verl's own, imported when this module is (the package imports it on first use of
``DistProfilerExtension``); without verl the methods are plain methods.
"""

from __future__ import annotations

from typing import Any, Callable

from rlprof.integrations.verl import run_signals
from rlprof.integrations.verl.dist_profiler import DistProfiler
from rlprof.integrations.verl.sections import field, role_section


def _one_to_all(method: Callable) -> Callable:
    try:
        from verl.single_controller.base.decorator import Dispatch, register
    except ImportError:  # verl is not installed: nothing dispatches these methods
        return method
    return register(dispatch_mode=Dispatch.ONE_TO_ALL)(method)


class DistProfilerExtension:
    """Mixin of a verl worker whose profiler is ``self.profiler`` (a :class:`DistProfiler`)."""

    def __init__(self, profiler: DistProfiler):
        self.profiler = profiler
        self._publish_rollout_section()

    def _publish_rollout_section(self) -> None:
        """A worker hosting the rollout role (verl's ``ActorRolloutRefWorker``, its ``config.rollout``)
        publishes the rollout's own profiler section for the run's replicas: verl builds a replica
        server's profiler without one when the tool is not torch or npu
        (:func:`rlprof.integrations.verl.rollout_profiler.build_rollout_dist_profiler` reads it)."""
        prof = getattr(self.profiler, "profiler", None)
        section = field(field(getattr(self, "config", None), "rollout"), "profiler")
        if section is None or prof is None or not prof.plan.active or "rollout" not in self.profiler.roles:
            return
        try:
            run_signals.publish_rollout_section(prof.run.run_id, role_section(section, None))
        except Exception as exc:  # the replicas then run unprofiled, as verl builds them
            import logging

            logging.getLogger("rlprof").debug("rlprof: the rollout's section not published: %s", exc)

    @_one_to_all
    def start_profile(self, **kwargs: Any) -> None:
        """Begin profiling this rank's current training step (``profile_step=N``)."""
        self.profiler.start(**kwargs)

    @_one_to_all
    def stop_profile(self, run_command: bool | None = None) -> None:
        """End the step; ``run_command=True`` (the trainer's last profiled step) finalizes this process's
        profiling and runs the finish hook (see :meth:`DistProfiler.stop`)."""
        self.profiler.stop(run_command=run_command)

    @_one_to_all
    def step_profile(self) -> None:
        """Advance the sampled region by one iteration (verl's ``DistProfiler.step``)."""
        self.profiler.step()
