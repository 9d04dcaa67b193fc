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
  (the trainer's last profiled step), ``exit`` when the trainer's ``fit`` returned (it then waits, as the
  driver does below, its actors still alive) or the driver of ``python -m rlprof.verl`` saw verl's entry point
  return;
* ``<run>/process/<host>-<pid>`` — ``open`` while a process profiles, ``finalized`` once it finalized;
* ``<run>/rollout`` — the rollout's own profiler section (``config.rollout.profiler`` of the training
  worker that hosts the rollout role; JSON). verl's agent-loop servers drop theirs when the tool is not torch or npu (they pass
  ``config=None``); a replica then reads this one, so that rlprof still times its ``rollout_generate``
  (:func:`rlprof.integrations.verl.rollout_profiler.build_rollout_dist_profiler`);
* ``<run>/global`` — rlprof's own ``global_profiler`` keys set in the trainer's config (JSON), which verl
  hands no worker: written where the trainer is built, before any worker exists, read by every
  ``DistProfiler`` as it is built (:mod:`rlprof.integrations.verl.global_keys`);
* ``<run>/dir/<host>-<pid>`` — the run directory a profiling process writes in, for the driver's closing
  line (:func:`finish_run`).

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
from dataclasses import dataclass
from typing import Callable, Mapping

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


def _put(key: str, value: str) -> bool:
    """Write ``key``; False when the store cannot be reached (never raises)."""
    kv = _kv()
    if kv is None:
        return False
    try:
        kv._internal_kv_put(key, value.encode(), overwrite=True, namespace=NAMESPACE)
    except Exception as exc:  # the store is the run's convenience, never a reason to stop training
        log.debug("rlprof: cannot write %s to Ray's key-value store: %s", key, exc)
        return False
    return True


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
    return f"{run_id}/process/{_this_process()}"


def _this_process() -> str:
    from rlprof.layout import hostname

    return f"{hostname()}-{os.getpid()}"


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


def publish_reason(run_id: str, step: int, reason: str) -> None:
    """The trainer captures ``step`` though no plan named it, for ``reason`` (its decider's: ``requested: <id>``,
    ``triggered: ...``): every worker and replica reads it as the step starts (:func:`reason_of`)."""
    _put(f"{run_id}/unplanned/{int(step)}", reason)


def reason_of(run_id: str, step: int) -> str | None:
    """Why the trainer captures ``step`` unplanned, or None (a planned step, or outside Ray)."""
    return _get(f"{run_id}/unplanned/{int(step)}")


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


def publish_global(run_id: str, keys: dict) -> bool:
    """rlprof's ``global_profiler`` keys the trainer's config sets (plain values), for every profiling
    process of the run; False when they could not be written (outside Ray, or not JSON)."""
    import json

    try:
        text = json.dumps(keys)
    except (TypeError, ValueError) as exc:
        log.debug("rlprof: the trainer's global_profiler keys are not JSON, not published: %s", exc)
        return False
    return _put(f"{run_id}/global", text)


def global_section(run_id: str) -> dict | None:
    """The keys :func:`publish_global` stored for ``run_id``, or None."""
    import json

    value = _get(f"{run_id}/global")
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


def watch(run_id: str, finalize: Callable[[str], bool], run_dir: str | None = None) -> None:
    """In a profiling process inside Ray: say ``open`` (and the run directory it writes in, ``run_dir``,
    for the driver's closing line) and start the one thread that calls ``finalize(how)`` once the run's
    profiling is over, until it returns True (it returns False while a step of the process is still in
    progress and ``how`` is ``LAST``). Once per run id."""
    if _kv() is None:
        return
    with _watched_lock:
        if run_id in _watched:
            return
        if run_dir is not None:
            _put(f"{run_id}/dir/{_this_process()}", os.path.abspath(run_dir))
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
    """In the driver, after verl's entry point returned (and in the trainer, once its ``fit`` returned: its actors are
    alive then): tell every profiling process of ``run_ids`` that the run is over and wait until each finalized (at most ``timeout_s``, default
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
    disconnects it, then print its :func:`closing_lines`. Registered with ``threading._register_atexit``,
    whose callbacks run before any :mod:`atexit` handler (Ray's ``shutdown`` is one). Once per process."""
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
        run_ids = possible_run_ids()
        finish_run(run_ids)
        for line in closing_lines(run_ends(run_ids)):
            print(line, flush=True)
    except Exception as exc:  # an exit path must not fail
        log.error("rlprof: waiting for the verl run's processes to finalize failed: %s: %s", type(exc).__name__, exc)


@dataclass(frozen=True)
class RunEnd:
    """What the run's signals say of one run id at its end (:func:`run_ends`)."""

    run_id: str
    processes: Mapping[str, str]
    """Every profiling process of the run (``<host>-<pid>``) -> ``open`` or ``finalized``."""
    run_dirs: tuple[str, ...]
    """The run directories its processes wrote in (one per node whose ``save_path`` differs; usually one)."""

    @property
    def finalized(self) -> int:
        return sum(1 for state in self.processes.values() if state == "finalized")


def run_ends(run_ids: list[str]) -> list[RunEnd] | None:
    """In the driver, once :func:`finish_run` returned: each of ``run_ids`` as its processes left it,
    or None when Ray's store cannot be reached (then nothing is known)."""
    kv = _kv()
    if kv is None:
        return None
    ends = []
    for run_id in run_ids:
        processes = {key: _get(f"{run_id}/process/{key}") or "open" for key in _keys(kv, f"{run_id}/process/")}
        dirs = tuple(sorted({d for d in (_get(f"{run_id}/dir/{key}") for key in _keys(kv, f"{run_id}/dir/")) if d}))
        if any(state != "finalized" for state in processes.values()):
            on_disk = _finalized_on_disk(dirs)
            processes = {key: "finalized" if key in on_disk else state for key, state in processes.items()}
        ends.append(RunEnd(run_id, processes, dirs))
    return ends


def _finalized_on_disk(run_dirs: tuple[str, ...]) -> set[str]:
    """``<host>-<pid>`` of the processes whose manifest, in a run directory this node holds, says ``finalized``:
    a process finalized by its own exit handler (after SIGTERM) never says so in the store."""
    from pathlib import Path

    from rlprof.manifest import read_records

    here = [Path(d) for d in run_dirs if Path(d).is_dir()]
    try:
        return {f"{r.get('host')}-{r.get('pid')}" for r in read_records(here) if r.get("type") == "finalized"} if here else set()
    except Exception:  # an exit path: what cannot be read is not counted
        return set()


def closing_lines(ends: list[RunEnd] | None) -> list[str]:
    """The driver's last word on the run: one line per run id that had profiling processes, saying where
    the profile is, how many of its processes finalized, and the command that reads it (as this user
    would type it: :func:`rlprof.invocation.rlprof_command`). A run where no process profiled says so in
    one line; nothing when the store could not be reached (``ends`` None)."""
    import shlex

    from rlprof.invocation import rlprof_command

    if ends is None:
        return []
    lines = []
    for end in ends:
        if not end.processes:
            continue
        where = " ".join(shlex.quote(d) for d in end.run_dirs) or f"<save_path>/{end.run_id}"
        pending = sorted(key for key, state in end.processes.items() if state != "finalized")
        said = f"{end.finalized} of {len(end.processes)} profiling processes finalized"
        if pending:
            said += f"; not: {', '.join(pending)}"
        lines.append(f"rlprof: the profile of this verl run is in {where} ({said}); read it: {rlprof_command()} report {where}")
    if not lines:
        lines.append("rlprof: no process of this verl run profiled (global_profiler.tool and steps, and a role's "
                     "profiler.enable with its ranks, select what is profiled)")
    return lines


def _keys(kv, prefix: str) -> list[str]:
    """The names under ``prefix`` in the run's namespace, the prefix taken off."""
    try:
        keys = kv._internal_kv_list(prefix, namespace=NAMESPACE)
    except Exception:
        return []
    names = [key.decode() if isinstance(key, bytes) else str(key) for key in keys]
    return [name[len(prefix):] for name in names if name.startswith(prefix)]


def _open_processes(kv, run_id: str) -> list[str]:
    prefix = f"{run_id}/process/"
    return [key for key in _keys(kv, prefix) if _get(prefix + key) == "open"]
