"""Blocking one thread on a task that runs on an asyncio event loop, only where that can end.

A rollout replica's server closes its capture (and an engine exports its trace) as a task on the
server's event loop; the end of the run may come on another thread (verl's run-end watcher) and must
wait for that task. Whether it can is one question, asked the same way by the verl replica profiler
and the engine replica: :func:`waitable_from_here`.
"""

from __future__ import annotations

import asyncio


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
