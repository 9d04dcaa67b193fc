"""rlprof inside verl: verl's profiler classes backed by rlprof, switched on without editing verl.

* :class:`DistProfiler`, :class:`DistProfilerExtension`, :func:`build_rollout_dist_profiler` — the
  surface verl's workers, trainer and rollout servers use (a worker may import them from here);
* :func:`install` — replaces verl's own classes in this process and, through verl's ``verl.plugins``
  entry point, in every Ray worker (``python -m rlprof.verl verl.trainer.main_ppo ...`` does it for
  you); then ``global_profiler.tool`` may name any installed rlprof backend.

``DistProfilerExtension`` uses verl's ``@register`` decorator, so it is built (and verl imported) on
first access only; ``from rlprof.verl import DistProfiler`` never imports verl. See docs/verl.md.
"""

from __future__ import annotations

from typing import Any

from rlprof.integrations.verl.dist_profiler import DistProfiler
from rlprof.integrations.verl.rollout_profiler import build_rollout_dist_profiler
from rlprof.integrations.verl.install import install, installed, uninstall

__all__ = ["DistProfiler", "DistProfilerExtension", "build_rollout_dist_profiler", "install", "installed", "uninstall"]


def __getattr__(name: str) -> Any:
    if name == "DistProfilerExtension":
        from rlprof.integrations.verl.extension import DistProfilerExtension

        return DistProfilerExtension
    raise AttributeError(f"module 'rlprof.verl' has no attribute {name!r}")
