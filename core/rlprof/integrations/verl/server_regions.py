"""A rollout replica server's own regions where rollout and training overlap (verl's fully async policy).

In a synchronous run a replica's step is one ``rollout_generate`` from ``start_profile`` to
``stop_profile`` (:class:`~rlprof.integrations.verl.rollout_profiler.RolloutDistProfiler`). In an async
run the replica generates, waits, and pauses for weight syncs inside one parameter version, so the
server's own calls are the regions (docs/analysis.md, "Async overlap"):

* ``rollout_generate``: each request the model generates (the server's call that runs the model, not
  the time a request waits at the server's gate);
* ``rollout_weight_pause``: from the end of ``abort_all_requests`` (the gate closed, the request in
  flight done: nothing generates) to the end of ``resume_generation``;
* ``rollout_weight_load``: ``update_weights`` (the engine loading the weights), inside the pause;
* ``rollout_resume``: ``resume_generation``, inside the pause.

A server switches to these regions at its first weight sync (``abort_all_requests``: a synchronous
trainer never calls it, and keeps the step-long ``rollout_generate``). verl stops a replica's profiling just before the weight sync that ends its version
(``FullyAsyncTrainer._fit_update_weights``); a wrapped server's profiler then ends the step after that
sync's resume (:meth:`RolloutDistProfiler.sync_ended`), so that the pause belongs to the version it ends
and the replica's step N runs from the sync that ends the trainer's step N - 1 to the one that ends
step N, on the trainer's clock.

:func:`wrap_server` wraps a server class's methods by name (once); the server holds its
``RolloutDistProfiler`` as ``profiler_controller`` (verl's servers do). Outside a profiled step every
wrapper is one attribute read.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

CONTROLLER = "profiler_controller"


def _controller(server: Any) -> Any:
    from rlprof.integrations.verl.rollout_profiler import RolloutDistProfiler

    controller = getattr(server, CONTROLLER, None)
    return controller if isinstance(controller, RolloutDistProfiler) else None


def _region(controller: Any, stage: str) -> Any:
    return controller.profiler.unsampled_role("rollout", stage)


def wrap_server(cls: Any, *, generate: str = "generate", abort: str = "abort_all_requests",
                resume: str = "resume_generation", load: str = "update_weights") -> None:
    """Time ``cls``'s calls as the replica's async regions (see the module doc). ``generate`` names the
    method that runs the model for one request (sync or async); the others are verl's server API."""
    if getattr(cls, "rlprof_server_regions", False):
        return
    _wrap_timed(cls, generate, "generate")
    _wrap_timed(cls, load, "weight_load")

    def around_abort(original):
        async def abort_all_requests(self, *args, **kwargs):
            result = await original(self, *args, **kwargs)
            controller = _controller(self)
            if controller is not None:  # a server that syncs weights: its regions are its calls from now on
                controller.regions_by_request = True
                controller.pause_began(_region(controller, "weight_pause") if controller._rlprof_live else None)
            return result
        return abort_all_requests

    def around_resume(original):
        async def resume_generation(self, *args, **kwargs):
            controller = _controller(self)
            if controller is None or not controller._rlprof_live:
                result = await original(self, *args, **kwargs)
            else:
                with _region(controller, "resume"):
                    result = await original(self, *args, **kwargs)
            if controller is not None:
                controller.sync_ended()
            return result
        return resume_generation

    for name, make in ((abort, around_abort), (resume, around_resume)):
        original = getattr(cls, name)
        setattr(cls, name, functools.wraps(original)(make(original)))
    cls.rlprof_server_regions = True


def _wrap_timed(cls: Any, name: str, stage: str) -> None:
    original = getattr(cls, name)
    if inspect.iscoroutinefunction(original):
        async def timed(self, *args, **kwargs):
            controller = _controller(self)
            if controller is None or not (controller.regions_by_request and controller._rlprof_live):
                return await original(self, *args, **kwargs)
            with _region(controller, stage):
                return await original(self, *args, **kwargs)
    else:
        def timed(self, *args, **kwargs):
            controller = _controller(self)
            if controller is None or not (controller.regions_by_request and controller._rlprof_live):
                return original(self, *args, **kwargs)
            with _region(controller, stage):
                return original(self, *args, **kwargs)
    setattr(cls, name, functools.wraps(original)(timed))
