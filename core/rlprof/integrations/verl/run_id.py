"""One run id per verl training run, in every process: the driver, the TaskRunner, every worker.

verl builds a ``DistProfiler`` in each worker on its own; none of them is told about the others, so
the run id comes from what those processes share: ``RLPROF_RUN_ID`` (set by :func:`rlprof.verl.install`
in the driver before Ray starts), else the Ray job. The order itself is decided in one place,
:mod:`rlprof.runtime.run_id`; this module only says that verl's processes use its Ray job step.
"""

from __future__ import annotations

from rlprof.runtime.run_id import shared_run_id as _shared


def shared_run_id() -> str | None:
    """The run id every process of this verl run agrees on, or None (the Profiler then makes one)."""
    return _shared(ray_job=True)
