"""rlprof: one profiling layer for distributed RL training.

``import rlprof`` is cheap: it loads pluggy's markers and nothing else; torch, ray, nvtx,
torch_npu and omegaconf are imported only by the parts that need them.

The public surface:

* :class:`Profiler` — one per worker process (``rlprof.runtime.profiler``)
* :func:`load_config`, :class:`ConfigError` — verl-compatible configuration (``rlprof.config``)
* :func:`resolve_plan` — the resolver (``rlprof.runtime.plan``)
* :data:`hookimpl` — the marker for backend hook implementations (``rlprof.hookspecs``)
"""

from __future__ import annotations

from rlprof.errors import BackendError, ConfigError

__version__ = "0.1.0"

_LAZY = {
    "hookimpl": ("rlprof.hookspecs", "hookimpl"),
    "Profiler": ("rlprof.runtime.profiler", "Profiler"),
    "load_config": ("rlprof.config", "load_config"),
    "ProfilerConfig": ("rlprof.config", "ProfilerConfig"),
    "resolve_plan": ("rlprof.runtime.plan", "resolve_plan"),
    "Schedule": ("rlprof.config.schedule", "Schedule"),
}

__all__ = ["BackendError", "ConfigError", "Profiler", "ProfilerConfig", "Schedule", "hookimpl", "load_config", "resolve_plan", "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlprof' has no attribute {name!r}")
