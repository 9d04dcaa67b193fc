"""Backend discovery through the ``rlprof.backends`` entry-point group, and the typed facade over pluggy.

Only the backends the config selects are imported (a broken unrelated plugin cannot break a run);
a failing import names the entry point, its distribution and version. Every hook implementation is
called on its own (:class:`Backends`), so one raising backend loses nobody else's data.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Iterable, Mapping

import pluggy

from . import hookspecs
from .errors import BackendError, ConfigError

GROUP = "rlprof.backends"
OUR_PACKAGES = {"torch": "rlprof-torch", "torch_memory": "rlprof-torch", "nsys": "rlprof-nsys", "npu": "rlprof-npu"}
HOOKS = ("validate_tool_config", "check_environment", "start_step", "start_role", "stop_role", "step_boundary", "finalize", "worker_runtime_env")

log = logging.getLogger("rlprof")


def discover() -> dict[str, metadata.EntryPoint]:
    """Installed backends by name; reads metadata only, imports nothing."""
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=GROUP):
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
        f"global_profiler.tool: got {name!r}, but no installed backend has that name.{hint} "
        f"Installed backends: {', '.join(names) if names else '(none)'}",
        key="global_profiler.tool",
    )


def load_backend(name: str, eps: Mapping[str, metadata.EntryPoint] | None = None) -> Any:
    """Import the entry point ``name`` and instantiate its backend class."""
    eps = discover() if eps is None else eps
    if name not in eps:
        raise not_installed_error(name, eps)
    ep = eps[name]
    dist, version = distribution_of(ep)
    try:
        obj = ep.load()
        return obj() if isinstance(obj, type) else obj
    except Exception as exc:
        raise BackendError(
            f'Error importing backend "{name}" (entry point {ep.value!r} in {dist} {version}): '
            f"{type(exc).__name__}: {exc}",
            key="global_profiler.tool",
        ) from exc


def plugin_manager() -> pluggy.PluginManager:
    """A fresh manager with the spec loaded; one per Profiler (no global state)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def implemented_hooks(plugin: Any) -> list[str]:
    """The hooks of the spec that ``plugin`` implements, in spec order."""
    pm = plugin_manager()
    pm.register(plugin)
    return [h for h in HOOKS if getattr(pm.hook, h).get_hookimpls()]


@dataclass
class _Impl:
    backend: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]


class Backends:
    """The selected backends of one Profiler, with one typed, isolated method per hook.

    A backend whose hook raises is logged once (backend, hook, rank, traceback), reported through
    ``on_error`` (the manifest), and skipped for the rest of the run; the caller carries on.
    ``strict=True`` (env ``RLPROF_STRICT=1``) re-raises instead. ``RLPROF_TRACE_HOOKS=1`` prints
    every call to stderr.
    """

    def __init__(self, names: Iterable[str], *, rank: int = 0, on_error: Callable[[str, str, BaseException], None] | None = None,
                 instances: Mapping[str, Any] | None = None):
        self.rank = rank
        self.names = tuple(names)
        self.strict = os.environ.get("RLPROF_STRICT", "") not in ("", "0")
        self.trace = os.environ.get("RLPROF_TRACE_HOOKS", "") not in ("", "0")
        self.failed: dict[str, str] = {}
        self._on_error = on_error
        self.pm = plugin_manager()
        eps = discover() if instances is None else {}
        self.plugins: dict[str, Any] = {}
        for name in self.names:
            plugin = instances[name] if instances is not None else load_backend(name, eps)
            self.plugins[name] = plugin
            self.pm.register(plugin, name=name)
        self.pm.check_pending()
        self.impls: dict[str, list[_Impl]] = {}
        """Hook name -> implementations in ``names`` order (read by the Profiler's dispatch loop)."""
        for hook in HOOKS:
            caller = getattr(self.pm.hook, hook)
            impls = []
            for impl in caller.get_hookimpls():
                impls.append(_Impl(impl.plugin_name, impl.function, tuple(impl.argnames)))
            order = {n: i for i, n in enumerate(self.names)}
            impls.sort(key=lambda i: order.get(i.backend, 0))
            self.impls[hook] = impls

    def has(self, hook: str) -> bool:
        return bool(self.impls[hook])

    def call_one(self, backend: str, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on one backend only, isolated. Returns its result, or None if it failed."""
        for impl in self.impls[hook]:
            if impl.backend == backend:
                return self._invoke(impl, hook, kwargs)
        return None

    def validated_tool_config(self, backend: str, role) -> dict[str, Any]:
        """``role``'s ``tool_config.<backend>`` section (a :class:`~rlprof.config.RoleConfig`), checked
        and normalised by the backend's ``validate_tool_config``; the section as written when the
        backend does not validate. The one place the core asks a backend about its config.

        :raises ConfigError: the backend rejected it, or its check itself failed (named as such)."""
        raw = dict(role.tool_config.get(backend, {}))
        key = f"{role.key_path}.tool_config.{backend}"
        try:
            result = self.call_one(backend, "validate_tool_config", tool_config=raw, key_path=key)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"{key}: backend {backend!r} failed to validate it: {type(exc).__name__}: {exc}", key=key) from exc
        return dict(result) if result is not None else raw

    def invoke(self, impl: _Impl, hook: str, ctx: Any) -> Any:
        """Call one lifecycle hookimpl with its context object (the hot path of every region)."""
        if impl.argnames == ("ctx",) and not self.trace:
            try:
                return impl.function(ctx=ctx)
            except Exception as exc:
                return self._failed(impl, hook, exc)
        return self._invoke(impl, hook, {"ctx": ctx})

    def _invoke(self, impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> Any:
        if self.trace:
            shown = {k: getattr(v, "region", None) or getattr(v, "step", None) or v for k, v in kwargs.items()}
            print(f"rlprof[{os.getpid()} rank{self.rank}] {impl.backend}.{hook}({shown})", file=sys.stderr)
        try:
            return impl.function(**{name: kwargs[name] for name in impl.argnames})
        except Exception as exc:
            return self._failed(impl, hook, exc)

    def _failed(self, impl: _Impl, hook: str, exc: Exception) -> None:
        if self.strict or hook == "validate_tool_config":
            raise exc
        self.failed.setdefault(impl.backend, hook)
        log.error(
            "rlprof: backend %r failed in %s on rank %d; it is skipped for the rest of the run, training goes on:\n%s",
            impl.backend, hook, self.rank, "".join(traceback.format_exception(exc)),
        )
        if self._on_error is not None:
            self._on_error(impl.backend, hook, exc)
        return None


def backend_info(name: str, ep: metadata.EntryPoint) -> dict[str, Any]:
    """What ``rlprof backends`` shows for one backend: imports it, never raises."""
    dist, version = distribution_of(ep)
    info: dict[str, Any] = {"name": name, "entry_point": ep.value, "distribution": dist, "version": version}
    started = time.perf_counter()
    try:
        plugin = load_backend(name, {name: ep})
    except Exception as exc:
        info.update(imports=False, error=str(exc), hooks=[], problems=[])
        return info
    info["imports"] = True
    info["import_ms"] = round((time.perf_counter() - started) * 1000, 1)
    info["hooks"] = implemented_hooks(plugin)
    pm = plugin_manager()
    pm.register(plugin, name=name)
    try:
        problems = [p for found in pm.hook.check_environment() for p in (found or [])]
    except Exception as exc:  # a backend's own check must not break the listing
        problems = [f"check_environment raised {type(exc).__name__}: {exc}"]
    info["problems"] = problems
    return info
