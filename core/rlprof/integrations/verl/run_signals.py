"""What the processes of one verl run tell each other about profiling, through Ray's key-value store.

Why it is needed: verl's trainer tells each training worker its profiled step
(``start_profile(profile_step=N)``) and its last one (``stop_profile(run_command=True)``), but a
rollout replica's server hears ``start_profile()`` / ``stop_profile()`` only: no step, no end. And
the end of the job gives no process a chance to finalize: the workers and servers are owned by
verl's ``TaskRunner`` actor, and when the job ends Ray force-kills them (no SIGTERM, no atexit).

So, under the run id every process shares (``<run>`` below), in Ray's internal key-value store
(namespace ``rlprof``, on the head node's GCS, so every node sees it):

* ``<run>/step`` — the profiled step the trainer began last. The trainer starts the training worker
  group (and waits for it) before it starts the replicas, so a replica's ``start()`` reads its step here;
* ``<run>/done`` — profiling is over: ``last`` when a training worker got ``stop(run_command=True)``
  (the trainer's last profiled step), ``exit`` when the driver of ``python -m rlprof.verl`` saw
  verl's entry point return;
* ``<run>/process/<host>-<pid>`` — ``open`` while a process profiles, ``finalized`` once it finalized;
* ``<run>/rollout`` — the rollout's own profiler section (``config.rollout.profiler`` of the training
  worker that hosts the rollout role; JSON). verl's agent-loop servers drop theirs when the tool is not torch or npu (they pass
  ``config=None``); a replica then reads this one, so that rlprof still times its ``rollout_generate``
  (:func:`rlprof.integrations.verl.dist_profiler.build_rollout_dist_profiler`).

Every profiling process inside Ray runs one daemon thread (:func:`watch`) that reads ``<run>/done``
every :data:`POLL_S` seconds and then finalizes the process's profiling (``last``: once no step of the
process is in progress; ``exit``: at once). The driver (:func:`finish_run`) sets ``exit`` and waits,
at most ``RLPROF_VERL_FINALIZE_WAIT_S`` seconds (default 30), until every ``open`` process says
``finalized`` — the job, and with it every worker, lives until then. A process that died never says
``finalized``: the driver stops waiting at the limit and the report still shows it "not finalized".

Outside Ray (or when Ray's store cannot be reached) every function here does nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Callable

log = logging.getLogger("rlprof")

NAMESPACE = "rlprof"
POLL_S = 0.5
"""How often a profiling process reads whether the run's profiling is over (one small GCS read)."""
WAIT_ENV = "RLPROF_VERL_FINALIZE_WAIT_S"
LAST, EXIT = "last", "exit"
"""Values of ``<run>/done``: the trainer's last profiled step ended; the driver's entry point returned."""

_watched: dict[str, threading.Thread] = {}
_watched_lock = threading.Lock()


def _kv():
    """Ray's internal key-value module when this process is connected to Ray, else None (never imports Ray)."""
    ray = sys.modules.get("ray")
    if ray is None:
        return None
    try:
        if not ray.is_initialized():
            return None
        from ray.experimental import internal_kv

        return internal_kv if internal_kv._internal_kv_initialized() else None
    except Exception:
        return None


def _put(key: str, value: str) -> None:
    kv = _kv()
    if kv is None:
        return
    try:
        kv._internal_kv_put(key, value.encode(), overwrite=True, namespace=NAMESPACE)
    except Exception as exc:  # the store is the run's convenience, never a reason to stop training
        log.debug("rlprof: cannot write %s to Ray's key-value store: %s", key, exc)


def _get(key: str) -> str | None:
    kv = _kv()
    if kv is None:
        return None
    try:
        value = kv._internal_kv_get(key, namespace=NAMESPACE)
    except Exception:
        return None
    return value.decode() if value is not None else None


def process_key(run_id: str) -> str:
    from rlprof.layout import hostname

    return f"{run_id}/process/{hostname()}-{os.getpid()}"


def publish_step(run_id: str, step: int) -> None:
    """The trainer began profiled ``step`` (a training worker's ``start(profile_step=step)``)."""
    _put(f"{run_id}/step", str(int(step)))


def current_step(run_id: str) -> int | None:
    """The profiled step the trainer began last, or None (outside Ray, or no worker said it)."""
    value = _get(f"{run_id}/step")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def publish_rollout_section(run_id: str, section: dict) -> None:
    """The rollout's profiler section (verl's role-section keys, plain values), for the replicas whose
    server verl built without one. A section that is not JSON is left unpublished."""
    import json

    try:
        text = json.dumps(section)
    except (TypeError, ValueError) as exc:
        log.debug("rlprof: the rollout's profiler section is not JSON, not published: %s", exc)
        return
    _put(f"{run_id}/rollout", text)


def rollout_section(run_id: str) -> dict | None:
    """The section :func:`publish_rollout_section` stored for ``run_id``, or None."""
    import json

    value = _get(f"{run_id}/rollout")
    try:
        section = json.loads(value) if value is not None else None
    except ValueError:
        return None
    return section if isinstance(section, dict) else None


def publish_done(run_id: str, how: str) -> None:
    """Profiling of the run is over (``LAST`` or ``EXIT``, see the module doc); ``EXIT`` is never
    downgraded to ``LAST``."""
    if how == LAST and _get(f"{run_id}/done") == EXIT:
        return
    _put(f"{run_id}/done", how)


def mark_finalized(run_id: str) -> None:
    """This process finalized its profiling of the run."""
    _put(process_key(run_id), "finalized")


def watch(run_id: str, finalize: Callable[[str], bool]) -> None:
    """In a profiling process inside Ray: say ``open`` and start the one thread that calls
    ``finalize(how)`` once the run's profiling is over, until it returns True (it returns False
    while a step of the process is still in progress and ``how`` is ``LAST``). Once per run id."""
    if _kv() is None:
        return
    with _watched_lock:
        if run_id in _watched:
            return
        _put(process_key(run_id), "open")
        thread = threading.Thread(target=_watch, args=(run_id, finalize), name="rlprof-verl-run-end", daemon=True)
        _watched[run_id] = thread
    thread.start()


def _watch(run_id: str, finalize: Callable[[str], bool]) -> None:
    while True:
        time.sleep(POLL_S)
        if _kv() is None:  # Ray went away: the exit handlers take over
            return
        how = _get(f"{run_id}/done")
        if how is None:
            continue
        try:
            if finalize(how):
                return
        except Exception as exc:  # finalizing must never take the process down
            log.error("rlprof: finalizing at the end of the verl run failed: %s: %s", type(exc).__name__, exc)
            return


def finish_run(run_ids: list[str], timeout_s: float | None = None) -> list[str]:
    """In the driver, after verl's entry point returned: tell every profiling process of ``run_ids``
    that the run is over and wait until each finalized (at most ``timeout_s``, default
    ``RLPROF_VERL_FINALIZE_WAIT_S`` or 30 s). Returns the processes still not finalized."""
    kv = _kv()
    if kv is None:
        return []
    if timeout_s is None:
        try:
            timeout_s = float(os.environ.get(WAIT_ENV, "30"))
        except ValueError:
            timeout_s = 30.0
    for run_id in run_ids:
        publish_done(run_id, EXIT)
    deadline = time.monotonic() + timeout_s
    while True:
        pending = [key for run_id in run_ids for key in _open_processes(kv, run_id)]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if pending:
        log.warning("rlprof: %d profiling process(es) did not finalize within %.0f s (%s): they died or hang; the "
                    "report will say 'not finalized' for them", len(pending), timeout_s, ", ".join(pending))
    return pending


_finish_registered = False


def finish_at_exit() -> None:
    """In the driver (a process that installed the drop-in before it joined Ray): call
    :func:`finish_run` for this run when the driver's main thread ends, before Ray's own exit handler
    disconnects it. Registered with ``threading._register_atexit``, whose callbacks run before any
    :mod:`atexit` handler (Ray's ``shutdown`` is one). Once per process."""
    global _finish_registered
    if _finish_registered:
        return
    _finish_registered = True
    early = getattr(threading, "_register_atexit", None)
    try:
        if early is not None:
            early(_finish_this_run)
            return
    except RuntimeError:  # already shutting down
        return
    import atexit

    atexit.register(_finish_this_run)


def _finish_this_run() -> None:
    from rlprof.runtime.run_id import possible_run_ids

    try:
        finish_run(possible_run_ids())
    except Exception as exc:  # an exit path must not fail
        log.error("rlprof: waiting for the verl run's processes to finalize failed: %s: %s", type(exc).__name__, exc)


def _open_processes(kv, run_id: str) -> list[str]:
    prefix = f"{run_id}/process/"
    try:
        keys = kv._internal_kv_list(prefix, namespace=NAMESPACE)
    except Exception:
        return []
    pending = []
    for key in keys:
        key = key.decode() if isinstance(key, bytes) else str(key)
        if _get(key) == "open":
            pending.append(key[len(prefix):])
    return pending
