"""The hook watchdog: says so when a backend's hook runs far longer than any hook should.

A backend that blocks in a hook (a profiler waiting on a lock, a flush to a hung network file
system) would otherwise freeze training with no word. The core wraps every hook call in
:meth:`HookWatchdog.watch`; one daemon thread per watchdog looks at the calls in flight a few times
per limit and, for a call past the limit, calls ``report(backend, hook, rank, elapsed_s, stack)``
once, with the stack of the thread that is stuck (like :mod:`faulthandler`, from
``sys._current_frames()``). Training keeps waiting for the hook — the watchdog cannot safely
interrupt it — but the log and the manifest say which backend, which hook, which rank, and where.

Watching costs a thread-local lookup and an attribute store per call, not even a clock read (see
``bench/bench_watchdog.py``): the watchdog's thread notes when it first sees a call, so a report comes
between ``limit`` and ``limit`` plus two ticks (a tick is a fifth of the limit, at most 1 s) after the
hook began. No thread is started per call. The limit comes from ``RLPROF_HOOK_TIMEOUT_S`` (:func:`limit_from_env`; default 60 s,
``0`` turns the watchdog off).
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from time import monotonic
from typing import Any, Callable

from rlprof.env_seconds import seconds_from_env

log = logging.getLogger("rlprof")

ENV = "RLPROF_HOOK_TIMEOUT_S"
DEFAULT_LIMIT_S = 60.0

Report = Callable[[str, str, int, float, str], None]
"""``report(backend, hook, rank, elapsed_s, stack_text)``, called from the watchdog's thread;
``elapsed_s`` is how long the call has run at least (counted from the tick that first saw it)."""


def limit_from_env(environ: dict | None = None) -> float | None:
    """The hook time limit in seconds from ``RLPROF_HOOK_TIMEOUT_S`` (default 60; ``0`` or a
    negative number: no watchdog, returned as None). A value that is not a number is a
    :class:`~rlprof.errors.ConfigError` naming the variable (:func:`rlprof.env_seconds.seconds_from_env`)."""
    value = seconds_from_env(ENV, DEFAULT_LIMIT_S, "a finite number of seconds (0 turns the hook watchdog off)",
                             environ=environ)
    return value if value > 0 else None


class _Slot:
    """The watched-call state of one thread, and the context manager :meth:`HookWatchdog.watch`
    returns on it: ``call`` is ``(backend, hook, rank)`` while a watched hook runs, None otherwise
    (a new tuple per call, replaced as one object, so the watchdog's thread always reads a whole
    call and tells two calls apart by identity)."""

    __slots__ = ("call", "ident")
    __enter__ = type(None)  # a C callable that is not a descriptor: called without self, returns None

    def __init__(self, ident: int):
        self.call: tuple | None = None
        self.ident = ident

    def __exit__(self, exc_type, exc, tb):
        self.call = None
        return False


class _Unwatched:
    """What :meth:`HookWatchdog.watch` returns when it is off or the thread is already inside a
    watched call (which stays watched). ``__enter__``/``__exit__`` are C callables that are not
    descriptors, so the with-statement calls them without ``self``: ``NoneType()`` returns None and
    ``"".format(*exc_info)`` returns ``""`` (falsy: exceptions propagate)."""

    __slots__ = ()
    __enter__ = type(None)
    __exit__ = "".format


_UNWATCHED = _Unwatched()


class HookWatchdog:
    """Reports hook calls that run longer than ``limit_s`` seconds.

    :param limit_s: the limit; None or ``<= 0`` turns watching off.
    :param report: called once per call past the limit, from the watchdog's daemon thread, with
        ``(backend, hook, rank, elapsed_s, stack_text)``; an exception it raises is logged, never raised.
    :param clock: seconds, read once per :meth:`tick` (default :func:`time.monotonic`).
    :param ticking: start the daemon thread that calls :meth:`tick` a few times per limit (default);
        False: the owner calls :meth:`tick` itself (a test with a fake ``clock`` decides when time passes).

    Use::

        with watchdog.watch("torch", "stop_role", rank):
            impl(ctx)
        # or, cheaper (no with-statement):
        result = watchdog.call("torch", "stop_role", rank, impl, ctx)

    A watched call made inside another one on the same thread (a hook that re-enters the core) is
    covered by the outer call's watch.
    """

    def __init__(self, limit_s: float | None, report: Report, *, clock: Callable[[], float] = monotonic,
                 ticking: bool = True):
        self.limit_s = limit_s if limit_s is not None and limit_s > 0 else None
        self._report = report
        self._clock = clock
        self._seen: dict[_Slot, list] = {}
        """Slot -> ``[call, first seen, reported]``; holding the call tuple keeps its identity from being
        reused by a later call's tuple, so "the same object" means "the same call"."""
        self._local = threading.local()
        self._slots: list[_Slot] = []
        self._slots_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = 1.0
        self._watching = self.limit_s is not None
        if self._watching and ticking:
            # Look a few times per limit: a report comes at most ~1/5 of the limit (<= 1 s) late,
            # and a watchdog with nothing to do wakes at most once a second.
            self._interval = min(max(self.limit_s / 5, 0.01), 1.0)
            self._thread = threading.Thread(target=self._run, name="rlprof-hook-watchdog", daemon=True)
            self._thread.start()

    @property
    def active(self) -> bool:
        return self._watching and not self._stop.is_set()

    def watch(self, backend: str, hook: str, rank: int):
        """A context manager around one hook call of ``backend`` on ``rank``."""
        if not self._watching:
            return _UNWATCHED
        try:
            slot = self._local.slot
        except AttributeError:
            slot = self._new_slot()
        if slot.call is not None:  # already inside a watched call on this thread
            return _UNWATCHED
        slot.call = (backend, hook, rank)
        return slot

    def call(self, backend: str, hook: str, rank: int, fn: Callable[[Any], Any], arg: Any) -> Any:
        """``fn(arg)`` watched as one hook call of ``backend`` on ``rank``; returns what it returns,
        raises what it raises. The same as :meth:`watch` at about half the cost."""
        try:
            slot = self._local.slot
        except AttributeError:
            slot = self._new_slot()
        if slot.call is not None or not self._watching:
            return fn(arg)
        slot.call = (backend, hook, rank)
        try:
            return fn(arg)
        finally:
            slot.call = None

    def close(self) -> None:
        """Stop the watchdog thread (calls still in flight are no longer watched). Idempotent."""
        self._stop.set()
        self._watching = False
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2 * self._interval + 1)

    def _new_slot(self) -> _Slot:
        slot = self._local.slot = _Slot(threading.get_ident())
        with self._slots_lock:
            self._slots.append(slot)
        return slot

    # ------------------------------------------------------------------ the watchdog's thread

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.tick()

    def tick(self) -> None:
        """Look at the calls in flight once (the thread does this a few times per limit): a call not
        seen before is noted at the clock's now; one seen since at least ``limit_s`` ago is reported,
        once."""
        if not self._watching:
            return
        with self._slots_lock:
            slots = list(self._slots)
        now, seen, limit = self._clock(), self._seen, self.limit_s
        for slot in slots:
            call = slot.call
            state = seen.get(slot)
            if call is None:
                if state is not None:
                    del seen[slot]
            elif state is None or state[0] is not call:
                seen[slot] = [call, now, False]
            elif not state[2] and now - state[1] >= limit:
                state[2] = True
                self._emit(slot.ident, call, now - state[1])

    def _emit(self, ident: int, call: tuple, elapsed: float) -> None:
        backend, hook, rank = call
        try:
            self._report(backend, hook, rank, elapsed, thread_stack(ident))
        except Exception:  # a report that fails must not end the watchdog
            log.exception("rlprof: the hook watchdog's report failed")


def thread_stack(ident: int) -> str:
    """The Python stack of thread ``ident`` now, most recent call last (empty if it has ended)."""
    frame = sys._current_frames().get(ident)
    if frame is None:
        return ""
    name = next((t.name for t in threading.enumerate() if t.ident == ident), "?")
    lines = traceback.format_stack(frame)
    del frame
    return f'Thread {ident:#x} "{name}" (most recent call last):\n' + "".join(lines)
