"""The run id: the one function that decides it, for every process of a run.

The run id names the run's directory under ``save_path``; every process of one run must arrive at
the same one, or their files land in different directories. It is decided here, in this order:

1. an id the caller passes (the Ray controller hands its own to every worker);
2. ``RLPROF_RUN_ID`` in the environment: a user who sets it, or :func:`export_run_id` in a driver
   before it starts Ray, so that a local cluster's workers inherit it;
3. with ``ray_job`` (verl's processes, which are told nothing by one another), inside a connected Ray
   process, the Ray job: ``<session start>-job<job id>`` is the same in every process of one job
   and differs between jobs and cluster restarts;
4. otherwise a new id (:func:`rlprof.layout.new_run_id`): a process on its own.

Whatever the source, the id is spelled as a directory name (:func:`rlprof.layout.safe_name`).
Callers: :class:`~rlprof.Profiler`, :class:`~rlprof.ray.ProfilingController`, verl's
``DistProfiler`` (:mod:`rlprof.integrations.verl.run_id`) and the end-of-run wait in the verl driver
(:func:`possible_run_ids`).
"""

from __future__ import annotations

import os
import sys

from rlprof.layout import new_run_id, safe_name

RUN_ID_ENV = "RLPROF_RUN_ID"


def run_id_for(explicit: str | None = None, *, ray_job: bool = False) -> str:
    """The run id of this process's run (see the module doc for the order)."""
    return safe_name(explicit or shared_run_id(ray_job=ray_job) or new_run_id())


def shared_run_id(*, ray_job: bool = False) -> str | None:
    """The id every process of the run finds without being told (steps 2 and 3), or None."""
    return os.environ.get(RUN_ID_ENV) or (ray_job_run_id() if ray_job else None)


def possible_run_ids() -> list[str]:
    """Every id a process of this run may have decided without being told, as spelled: the
    environment's and the Ray job's (a process started without ``RLPROF_RUN_ID`` uses the job's).
    For a driver that waits for all of the run's processes."""
    found = (os.environ.get(RUN_ID_ENV), ray_job_run_id())
    return [safe_name(run_id) for run_id in dict.fromkeys(found) if run_id]


def export_run_id() -> str:
    """In a driver about to start Ray: ``RLPROF_RUN_ID`` set in this process's environment (unless
    it is set already), so that the processes it starts inherit it; returns it."""
    if not os.environ.get(RUN_ID_ENV):
        os.environ[RUN_ID_ENV] = new_run_id()
    return os.environ[RUN_ID_ENV]


def in_ray() -> bool:
    """This process is connected to Ray (asked without importing Ray where nothing did): a Ray worker or a
    driver that joined a cluster. The one such check (the step timings' sink, a Profiler's end, the verl
    drop-in's install)."""
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized())
    except Exception:
        return False


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
