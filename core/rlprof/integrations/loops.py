"""Blocking one thread on a task that runs on an asyncio event loop, only where that can end.

A rollout replica's server closes its capture (and an engine exports its trace) as a task on the
server's event loop; the end of the run may come on another thread (verl's run-end watcher) and must
wait for that task, at most :data:`FINALIZE_WAIT_S`. Whether it can (:func:`waitable_from_here`) and
the wait itself (:func:`wait_on_its_loop`) are written here once, for the verl replica profiler
(:mod:`rlprof.integrations.verl.rollout_profiler`) and the engine replica
(:mod:`rlprof.integrations.engines.replica`).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

FINALIZE_WAIT_S = 120.0
"""How long the end of the run waits, from another thread, for a replica's capture still closing or an
engine's export still running; past it the capture is named unfinished and the run ends without it."""


def waitable_from_here(task: "asyncio.Future") -> bool:
    """True when the calling thread may block until ``task`` is done: its loop is running, on another
    thread. On the loop's own thread a blocking wait never ends (the loop runs one thing at a time and
    it is this); on a loop that is not running nobody runs the task."""
    loop = task.get_loop()
    try:
        on_loop = asyncio.get_running_loop() is loop
    except RuntimeError:
        on_loop = False
    return not on_loop and loop.is_running()


def wait_on_its_loop(task: "asyncio.Future", waiting: Callable[[], Awaitable] | None = None,
                     timeout: float = FINALIZE_WAIT_S) -> bool:
    """Block this thread until ``task`` is done, at most ``timeout`` seconds, by running ``waiting()``
    (default: waiting for ``task`` itself, shielded so the wait's timeout does not cancel it) on the
    task's loop. False, at once, when this thread cannot wait for it (:func:`waitable_from_here`); True
    once the wait ended, whether the task finished, timed out or the loop stopped meanwhile (the
    caller reads ``task.done()``)."""
    if not waitable_from_here(task):
        return False
    coroutine = waiting() if waiting is not None else asyncio.wait_for(asyncio.shield(task), timeout)
    try:
        asyncio.run_coroutine_threadsafe(coroutine, task.get_loop()).result(timeout + 5.0)
    except Exception:  # timed out, or the loop stopped or is stuck: the caller names what is unfinished
        pass
    return True
