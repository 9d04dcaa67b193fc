"""Which backends are installed: the ``rlprof.backends`` entry-point group, read from package
metadata only (nothing is imported here).

A leaf: the config checks a tool name against it, the registry loads what it finds, and
``rlprof backends`` lists it.
"""

from __future__ import annotations

from importlib import metadata
from typing import Iterable

from rlprof.errors import BackendError, did_you_mean

GROUP = "rlprof.backends"
OUR_PACKAGES = {"torch": "rlprof-torch", "torch_memory": "rlprof-torch", "nsys": "rlprof-nsys", "npu": "rlprof-npu",
                "precision_debugger": "rlprof-msprobe"}
"""Backends this project ships, and the package that provides each (named when one is missing)."""


def discover(group: str = GROUP) -> dict[str, metadata.EntryPoint]:
    """Installed backends (or the entry points of another rlprof ``group``, e.g. engine adapters) by
    name, the first of each name; reads metadata only, imports nothing."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group):
        found.setdefault(ep.name, ep)
    return found


def distribution_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "?", "?"
    return dist.metadata["Name"], dist.version


def not_installed_error(name: str, installed: Iterable[str]) -> BackendError:
    names = sorted(installed)
    hint = f" It is provided by the package {OUR_PACKAGES[name]!r}: pip install {OUR_PACKAGES[name]}." if name in OUR_PACKAGES else ""
    return BackendError(
        f"global_profiler.tool: got {name!r}, but no installed backend has that name{did_you_mean(name, names)}.{hint} "
        f"Installed backends: {', '.join(names) if names else '(none)'}",
        key="global_profiler.tool", value=name, allowed=", ".join(names) or "(no backend installed)",
    )
