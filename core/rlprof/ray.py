"""Ray, for users: the controller, the worker base class and worker options.

A thin face over :mod:`rlprof.integrations.ray` (see there for the whole story); import from here.
"""

from rlprof.integrations.ray import (  # noqa: F401
    DEFAULT_TIMEOUT_S,
    HYBRID_ENGINE_STAGES,
    ProfiledWorker,
    ProfilingController,
    WorkerFailure,
    WorkerSpec,
    worker_options,
)

__all__ = ["DEFAULT_TIMEOUT_S", "HYBRID_ENGINE_STAGES", "ProfiledWorker", "ProfilingController", "WorkerFailure",
           "WorkerSpec", "worker_options"]
