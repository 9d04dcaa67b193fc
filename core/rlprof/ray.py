"""Ray, for users: the controller, the worker base class and worker options.

A thin face over :mod:`rlprof.integrations.ray` (the controller; its module doc tells the whole story
and names the modules of the other parts); import from here.
"""

from rlprof.integrations.ray import (  # noqa: F401
    DEFAULT_TIMEOUT_S,
    HYBRID_ENGINE_STAGES,
    ProfiledWorker,
    ProfilerArgs,
    ProfilingController,
    WorkerFailure,
    WorkerSpec,
    worker_options,
)

__all__ = ["DEFAULT_TIMEOUT_S", "HYBRID_ENGINE_STAGES", "ProfiledWorker", "ProfilerArgs", "ProfilingController",
           "WorkerFailure", "WorkerSpec", "worker_options"]
