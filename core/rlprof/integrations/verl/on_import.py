"""Run a patch on a verl module right after it is imported, without importing it early.

Why: some of verl's modules that rlprof must reach are expensive or impossible to import from the
drop-in's switch. ``verl.workers.rollout.vllm_rollout.vllm_async_server`` imports vLLM and
transformers (10-25 s) and fails where vLLM is not installed, and :func:`rlprof.verl.install` runs
while ``verl/__init__`` is still loading its plugins. So :func:`when_imported` patches such a module
at once when it is already loaded, and otherwise registers a finder on ``sys.meta_path`` that wraps
the module's loader: the module executes as usual, then the patch runs, before any code that
imported the module sees it. A patch that raises is logged and the module is left as verl wrote it.
"""

from __future__ import annotations

import functools
import importlib.abc
import logging
import sys
import threading
from typing import Any, Callable, Mapping

log = logging.getLogger("rlprof")

_pending: dict[str, list[Callable]] = {}
"""Module name → the patches to run once it has executed, in the order they were asked for (several
parts of the drop-in may patch one module: each keeps its own)."""
_lock = threading.Lock()
_finder: "_PatchAfterImport | None" = None


def when_imported(name: str, patch: Callable) -> None:
    """Call ``patch(module)`` for the module ``name``: now if it is loaded, else right after its import."""
    module = sys.modules.get(name)
    if module is not None:
        _run(patch, module)
        return
    global _finder
    with _lock:
        patches = _pending.setdefault(name, [])
        if patch not in patches:
            patches.append(patch)
        if _finder is None or _finder not in sys.meta_path:
            _finder = _PatchAfterImport()
            sys.meta_path.insert(0, _finder)


def forget(name: str) -> None:
    """Do not patch ``name`` when it is imported later (``rlprof.verl.uninstall``): none of its patches."""
    with _lock:
        _pending.pop(name, None)


def patch_classes(classes: Mapping[str, str], wrap: Callable[[Any], None]) -> None:
    """Call ``wrap(cls)`` for each ``module -> class name`` of ``classes`` once that module is imported
    (``None`` for a class the module lacks: ``wrap`` decides)."""
    for module, name in classes.items():
        when_imported(module, functools.partial(_class_of, name=name, then=wrap))


def unpatch_classes(classes: Mapping[str, str], unwrap: Callable[[Any], None]) -> None:
    """Undo :func:`patch_classes`: forget the modules not imported yet, ``unwrap(cls)`` for those that are."""
    for module, name in classes.items():
        forget(module)
        if module in sys.modules:
            unwrap(getattr(sys.modules[module], name, None))


def _class_of(module: Any, *, name: str, then: Callable[[Any], None]) -> None:
    then(getattr(module, name, None))


def _run(patch: Callable, module) -> None:
    try:
        patch(module)
    except Exception as exc:  # verl keeps its own behaviour; profiling must not break the import
        log.error("rlprof: patching %s failed, it runs as verl wrote it: %s: %s", module.__name__,
                  type(exc).__name__, exc)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a pending module it asks the other finders and wraps the loader they return."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _pending:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        with _lock:
            patches = _pending.pop(fullname, [])
        spec.loader = _ThenPatch(spec.loader, patches)
        return spec


class _ThenPatch(importlib.abc.Loader):
    """A loader that executes the module with the original loader, then runs the patches."""

    def __init__(self, loader, patches: list[Callable]):
        self._loader = loader
        self._patches = patches

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        for patch in self._patches:  # one that raises leaves the others to run
            _run(patch, module)

    def __getattr__(self, name):  # get_code, get_source, is_package...: the original loader's
        return getattr(self._loader, name)
