"""One run id per verl training run, in every process: the driver, the TaskRunner, every worker.

verl builds a ``DistProfiler`` in each worker on its own; none of them is told about the others.
The run id (the name of the run's directory under ``save_path``) therefore comes from what those
processes share:

1. ``RLPROF_RUN_ID`` — set by :func:`rlprof.verl.install` in the driver before Ray starts, so a
   local Ray cluster's workers inherit it; a user may set it too (e.g. through Ray's
   ``runtime_env.env_vars``);
2. otherwise, inside a Ray worker, the Ray job: ``<ray session start>-job<job id>`` is the same in
   every process of one job and differs between jobs and cluster restarts;
3. otherwise None: the Profiler makes a fresh id (a process on its own).
"""

from __future__ import annotations

import os
import sys

RUN_ID_ENV = "RLPROF_RUN_ID"


def shared_run_id() -> str | None:
    """The run id every process of this training run agrees on, or None (see the module doc)."""
    explicit = os.environ.get(RUN_ID_ENV)
    if explicit:
        return explicit
    return ray_job_run_id()


def ray_job_run_id() -> str | None:
    """``20261122-174000-job01000000`` inside a connected Ray process; None outside Ray."""
    ray = sys.modules.get("ray")  # never import Ray here: only a process already in Ray has a job
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        job = ray.get_runtime_context().get_job_id()
    except Exception:
        return None
    if not job:
        return None
    session = _session_started()
    return f"{session}-job{job}" if session else f"job{job}"


def _session_started() -> str | None:
    """The Ray session's start time as ``YYYYmmdd-HHMMSS`` (from its ``session_<date>_<time>_...``
    name), so that job ids, which restart with every cluster, do not reuse a run directory."""
    try:
        from ray._private import worker

        name = worker.global_worker.node.session_name  # session_2026-11-22_17-40-00_123456_789
    except Exception:
        return None
    parts = str(name).split("_")
    if len(parts) < 3:
        return None
    return parts[1].replace("-", "") + "-" + parts[2].replace("-", "") + (f"-{parts[3]}" if len(parts) > 3 else "")
