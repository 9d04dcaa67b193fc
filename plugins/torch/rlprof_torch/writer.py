"""Writing the torch backend's traces off the training thread: the core's background writer, and how long
``finalize`` waits for it.

Kineto must be stopped on the thread that started the profiler (stopping it from another thread
crashes the process), so the training thread still does ``stop()``. Everything after that is an
:class:`rlprof.runtime.trace_writer.Export` handed to the process's
:class:`~rlprof.runtime.trace_writer.TraceWriter` (the core's: a rollout replica's engine traces go
through the same thread), with a ``dump`` that exports the stopped profiler's plain JSON into the
backend's private :class:`rlprof.layout.ScratchDir` and then frees torch's result (without the GIL where
:mod:`rlprof_torch.nogil` can: see :meth:`rlprof_torch.session.TraceSession.export`); the writer then
gzips, hashes and places it under the name claimed when the capture closed (module docstring of
:mod:`rlprof.runtime.trace_writer`).

The export and the free on the fast path release the GIL, as zlib, hashlib and file reads do (torch's own
calls hold it throughout: bench/bench_torch_close.py prints both).
"""

from __future__ import annotations

from typing import Any

from rlprof.backend_api import seconds_from_env

WAIT_ENV = "RLPROF_TORCH_WRITE_TIMEOUT_S"
DEFAULT_WAIT_S = 300.0
"""How long ``finalize`` waits for traces still being compressed (a 10 GB trace takes minutes)."""


def wait_limit_from_env(environ: Any = None) -> float:
    """``finalize``'s wait, in seconds, from ``RLPROF_TORCH_WRITE_TIMEOUT_S`` (default 300; ``0`` or
    less: do not wait). A value that is not a finite number is a :class:`~rlprof.errors.ConfigError`
    naming the variable (:func:`rlprof.env_seconds.seconds_from_env`)."""
    return max(seconds_from_env(WAIT_ENV, DEFAULT_WAIT_S, "a finite number of seconds finalize waits for traces "
                                "still being written (0: do not wait)", environ=environ), 0.0)
