"""Ending a torch capture without the GIL: the stop, the save and the free of torch's result.

Why: torch 2.13 binds ``_disable_profiler`` (Kineto's stop: about 2.5 µs an event) and
``_ProfilerResult.save`` (the export: about 1.2 µs an event) without releasing the GIL, and the
result's C++ destructor runs under it too; a rollout replica's 374k-event capture held its process's
GIL for 1.5 s while verl's weight sync waited. The same three C++ functions, called with the GIL
released, let every other thread of the process run meanwhile (bench/bench_torch_close.py), and the
trace is byte for byte what torch's own export writes.

How (docs/torch-nogil.md has the mechanism and its defence):

* :mod:`rlprof_torch._nogil`, a small C++ extension built when rlprof-torch is installed (optional:
  no compiler, no extension), finds ``disableProfiler``, ``ProfilerResult::save`` and the result's
  destructor in the torch already loaded (``dlsym``; no torch headers) and calls them without the GIL;
* :func:`stop` stops a ``torch.profiler.profile`` through torch's own ``stop()`` (every step of it:
  the CUDA sync, the action table, the profiler-enabled flag), with only the call torch makes to
  ``torch.autograd.profiler._disable_profiler`` answered by the extension. That module global is
  replaced once per process by a router that serves :func:`stop`'s thread while it stops and hands
  every other call to torch's own function: a user's own profiler is untouched;
* torch keeps the returned :class:`rlprof_torch._nogil.Result` as ``kineto_results``, so
  ``export_chrome_trace`` calls its ``save(path)`` (without the GIL); :func:`free` destroys it
  without the GIL (its deallocation does the same).

The stop must still run on the thread that started the profiler (Kineto keeps the session there:
:class:`rlprof_torch.session.OtherThread`); the save and the free may run on any thread (the writer's).

Where the fast path cannot be used (the extension was not built, torch exports other symbols, a torch
outside :data:`CHECKED`, ``RLPROF_TORCH_NOGIL=0``), :func:`stop` calls torch as before and returns
:data:`TORCH`; :func:`unavailable` says why, and the backend says it once per process.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from typing import Any

from rlprof.backend_api import say_once

log = logging.getLogger("rlprof.torch")

NOGIL = "nogil"
"""The path of a capture stopped, saved and freed without the GIL (recorded per capture)."""
TORCH = "torch"
"""The path of a capture ended through torch's own calls, with the GIL held."""

ENV = "RLPROF_TORCH_NOGIL"
"""``0``: always torch's own path; ``1``: the fast path on any torch that exports the functions, even one
outside :data:`CHECKED`; unset or ``auto``: the fast path on a checked torch."""
CHECKED = ((2, 0), (2, 13))
"""The torch releases (major, minor) whose ``disableProfiler`` returns ``std::unique_ptr<ProfilerResult>``
(read in their headers; run here on 2.13). A mangled C++ name does not include the return type, so a
torch that changed it would still be found by name: outside this range the fast path waits for ``1``."""

_here = threading.local()
"""``stopping``: this thread is inside :func:`stop` on the fast path; ``taken``: the router served it."""
_lock = threading.Lock()
_state: dict[str, Any] = {}
"""``reason`` (None: usable) and ``module`` (the extension), worked out once per process."""


def unavailable() -> str | None:
    """Why the fast path cannot be used in this process, or None when it can (worked out once)."""
    with _lock:
        if "reason" not in _state:
            _state["reason"] = _load()
        return _state["reason"]


def _load() -> str | None:
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in ("0", "1", "auto"):
        say_once(f"torch: {ENV}={choice!r}", log, "rlprof: %s=%r is not one of 0, 1, auto; using auto", ENV,
                 os.environ.get(ENV))
        choice = "auto"
    if choice == "0":
        return f"switched off ({ENV}=0)"
    try:
        _nogil = importlib.import_module("rlprof_torch._nogil")
    except ImportError as exc:
        return (f"the extension rlprof_torch._nogil is not built ({exc}); it is built when rlprof-torch is installed "
                "with a C++ compiler at hand (pip install rlprof-torch)")
    import torch
    import torch.autograd.profiler as autograd_profiler

    version = _release(torch.__version__)
    if choice == "auto" and not (version is not None and CHECKED[0] <= version <= CHECKED[1]):
        return (f"torch {torch.__version__} is outside the releases whose profiler functions it was checked against "
                f"({'.'.join(map(str, CHECKED[0]))} to {'.'.join(map(str, CHECKED[1]))}); {ENV}=1 uses it anyway")
    if not callable(getattr(autograd_profiler, "_disable_profiler", None)):
        return "torch.autograd.profiler has no _disable_profiler to route"
    missing = _nogil.load(_torch_library())
    if missing is not None:
        return missing
    _state["module"] = _nogil
    return None


def _torch_library() -> str:
    """The loaded library the functions are looked up from: torch's ``_C`` module (``dlsym`` on it searches
    the libraries it links, ``libtorch_cpu`` among them)."""
    import torch

    return torch._C.__file__


def _release(version: str) -> tuple[int, int] | None:
    try:
        major, minor = version.split("+")[0].split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


class _Router:
    """``torch.autograd.profiler._disable_profiler`` once :func:`stop` has run: the extension's stop for
    the thread inside :func:`stop`, torch's own function for every other call."""

    def __init__(self, original, fast):
        self.original, self.fast = original, fast

    def __call__(self):
        if getattr(_here, "stopping", False):
            _here.taken = True
            return self.fast()
        return self.original()


def _route() -> None:
    import torch.autograd.profiler as autograd_profiler

    with _lock:
        current = autograd_profiler._disable_profiler
        if not isinstance(current, _Router):
            autograd_profiler._disable_profiler = _Router(current, _state["module"].disable)


class NoSession(RuntimeError):
    """No torch profiler runs on this thread: stopping would return an empty result, whose export
    crashes the process (torch's own path too), so nothing is stopped."""


def stop(profile) -> str:
    """Stop ``profile`` (a started ``torch.profiler.profile``) on this thread, the one that started it:
    without the GIL where :func:`unavailable` allows, else with torch's own call. The path taken:
    :data:`NOGIL` or :data:`TORCH`.

    :raises NoSession: no profiler runs on this thread (Kineto keeps its session per thread)."""
    import torch

    if not torch._C._autograd._profiler_enabled():
        raise NoSession(f"no torch profiler runs on thread {threading.get_ident()} "
                        f"({threading.current_thread().name}): nothing to stop")
    if unavailable() is not None:
        profile.stop()
        return TORCH
    _route()
    _here.stopping, _here.taken = True, False
    try:
        profile.stop()
    finally:
        _here.stopping = False
    return NOGIL if _here.taken else TORCH


def result_of(profile):
    """The stopped ``profile``'s result (torch's ``_ProfilerResult`` or the extension's), or None."""
    inner = getattr(profile, "profiler", None)
    return getattr(inner, "kineto_results", None)


def free(profile) -> None:
    """Destroy ``profile``'s result now, on this thread (after its save): without the GIL on the fast path;
    torch's own result with it (its destructor runs under the GIL). Left alone, a result lives as long as
    its ``torch.profiler.profile``, which is in a reference cycle (its action table holds its own bound
    methods): Python's cycle collector frees it later, on whichever thread it runs in, the training's
    included (0.74 s for an 866k-event capture, under the GIL)."""
    result = result_of(profile)
    if result is None:
        return
    module = _state.get("module")
    if module is not None and isinstance(result, module.Result):
        result.free()
    else:
        profile.profiler.kineto_results = None  # the last reference: torch's destructor, here and now
