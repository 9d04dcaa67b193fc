"""Finalizing at process exit: interpreter exit, SIGTERM, and the order Python shuts down in.

Every Profiler that has something to finish (a session to finalize, a finish hook to wait for)
registers here, and so does every process session (for a session whose Profilers were dropped
without ``finalize()``); when the process ends, each is finalized once, newest first, with reason
``exit`` or ``signal``. Registrations are weak: registering never keeps a Profiler alive.

Why not plain :mod:`atexit`: at interpreter exit Python first *joins every non-daemon thread*
(``threading._shutdown``) and only then runs atexit handlers. A backend whose own non-daemon thread
(a sampler, an exporter) waits for the finalize that would stop it deadlocks the exit. So the exit
handler is registered with ``threading._register_atexit``, which runs before those threads are
joined (the hook ``concurrent.futures`` uses for the same reason), and with :mod:`atexit` as a
fallback where that is not available; the second call finds nothing left to do.

SIGTERM (what Ray, Slurm and Kubernetes send first): the handler finalizes, then hands the signal
to the handler that was installed before (or, if that was the default action, re-raises it so the
process still ends with SIGTERM's status). The previous handler is put back once nothing registered
is left. Handlers are only installed from the main thread (Python's rule for signal handlers).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import weakref
from typing import Any

log = logging.getLogger("rlprof")

_lock = threading.RLock()
"""Re-entrant: SIGTERM may arrive while this thread holds it (a forked child running finalize_all at exit
when its pool terminates it), and the handler takes it again."""
_registered: dict[int, "weakref.ref[Any]"] = {}
"""id(obj) -> a weak reference to obj with ``finalize(reason=...)``, in registration order: what to
finalize at exit, not whether it was finalized (the object owns that: ``Profiler.finalized``,
``ProcessSession.finished``; its ``finalize`` is idempotent). Unregistering only prunes the list."""
_installed_pid: int | None = None
_previous_sigterm: Any = None
_our_sigterm = False


def register(obj: Any) -> None:
    """Finalize ``obj`` (``obj.finalize(reason="exit" | "signal")``) when the process ends, unless
    :func:`unregister` came first."""
    with _lock:
        _registered[id(obj)] = weakref.ref(obj)
        _install()


def unregister(obj: Any) -> None:
    """``obj`` finalized itself; forget it (and give SIGTERM back when nothing is left)."""
    with _lock:
        _registered.pop(id(obj), None)
        for key in [key for key, ref in _registered.items() if ref() is None]:
            del _registered[key]  # collected: nothing left to finish for it
        if not _registered:
            _restore_sigterm()


def finalize_all(reason: str) -> None:
    """Finalize everything registered by this process, newest first (colocated Profilers finalize
    their shared session with the last one). Never raises."""
    with _lock:
        pending = [obj for obj in (ref() for ref in list(_registered.values())) if obj is not None and _owned_here(obj)]
    for obj in reversed(pending):
        try:
            obj.finalize(reason=reason)
        except BaseException as exc:  # an exit path must not fail half-way
            log.error("rlprof: finalizing at %s failed: %s: %s", reason, type(exc).__name__, exc)


def _owned_here(obj: Any) -> bool:
    """Registered in this process (a forked child inherits its parent's registrations)."""
    run = getattr(obj, "run", None)
    return getattr(run, "pid", os.getpid()) == os.getpid()


def _install() -> None:
    global _installed_pid
    if _installed_pid == os.getpid():
        _install_sigterm()
        return
    _installed_pid = os.getpid()
    early = getattr(threading, "_register_atexit", None)
    if early is not None:
        try:
            early(_at_exit)
        except RuntimeError:  # already shutting down
            pass
    atexit.register(_at_exit)
    _install_sigterm()


def _at_exit() -> None:
    finalize_all("exit")


def _install_sigterm() -> None:
    global _previous_sigterm, _our_sigterm
    if _our_sigterm or threading.current_thread() is not threading.main_thread():
        return
    try:
        _previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        _our_sigterm = True
    except (ValueError, OSError):  # not allowed here (embedded interpreters)
        pass


def _restore_sigterm() -> None:
    global _previous_sigterm, _our_sigterm
    if not _our_sigterm or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, _previous_sigterm if _previous_sigterm is not None else signal.SIG_DFL)
    except (ValueError, OSError):
        pass
    _our_sigterm, _previous_sigterm = False, None


def _on_sigterm(signum, frame) -> None:
    previous = _previous_sigterm
    finalize_all("signal")
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
