"""Saying a thing once per process: the one memory of what was already said.

When: a backend warns about something that stays true for the whole process (no CUDA device, a
setting it ignores, torch_npu missing) from code that runs many times: a tool_config section is
validated for every role and every Profiler, a capture opens every step. The user should read the
warning once, not once per role or step.

Why one owner: a flag per module (or per backend instance) is state tests must find and reset one
by one, and two flags for the same fact drift (``check_environment`` said it, the first capture
says it again). Here a warning is known by its ``key`` — a string naming the fact, prefixed with
the backend (``"torch_memory: no CUDA"``) — and :func:`forget` resets everything, for tests.
"""

from __future__ import annotations

import logging
import threading

_said: set[str] = set()
_lock = threading.Lock()


def say_once(key: str, logger: logging.Logger, message: str, *args: object, level: int = logging.WARNING) -> bool:
    """Log ``message % args`` on ``logger`` unless ``key`` was said (or :func:`mark_said`) before
    in this process; return whether it was logged now."""
    if not mark_said(key):
        return False
    logger.log(level, message, *args)
    return True


def mark_said(key: str) -> bool:
    """Remember ``key`` as said without logging here (someone else shows the message, e.g. the core
    logs what ``check_environment`` returns); return whether it was new."""
    with _lock:  # two threads of one process (a Ray actor's) must not both say it
        if key in _said:
            return False
        _said.add(key)
        return True


def forget() -> None:
    """Forget everything said so far (tests that check a warning appears)."""
    with _lock:
        _said.clear()
