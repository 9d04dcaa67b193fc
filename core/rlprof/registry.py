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
from .context import FinalizeContext, IterationContext, RoleContext, StepContext
from .errors import BackendError, ConfigError

GROUP = "rlprof.backends"
OUR_PACKAGES = {"torch": "rlprof-torch", "torch_memory": "rlprof-torch", "nsys": "rlprof-nsys", "npu": "rlprof-npu"}
HOOKS = ("validate_tool_config", "check_environment", "start_step", "start_role", "iteration_boundary", "stop_role",
         "step_boundary", "finalize", "worker_runtime_env")
LIFECYCLE = ("start_step", "start_role", "iteration_boundary", "stop_role", "step_boundary", "finalize")

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


def _watchdog(report: Callable[[str, str, int, float, str], None]) -> Any:
    """The session's :class:`rlprof.watchdog.HookWatchdog` (limit ``RLPROF_HOOK_TIMEOUT_S``), or None when off."""
    from .watchdog import HookWatchdog, limit_from_env

    limit = limit_from_env()
    return HookWatchdog(limit, report) if limit is not None else None


class Backends:
    """The selected backends of one process session: a typed facade over pluggy with one method per
    lifecycle hook (tox's plugin manager style), each call isolated and watched.

    Every lifecycle method builds each backend's own context (its name, its validated tool_config
    from ``configs``) and calls the backends in ``names`` order, each on its own:

    * a backend that raises is logged once (backend, hook, rank, traceback), reported through
      ``on_error`` (the manifest), put in :attr:`failed` and skipped for new work; the session then
      releases it (closing calls through ``only=``, and ``finalize`` once). ``strict=True`` (env
      ``RLPROF_STRICT=1``) re-raises instead;
    * a call running longer than ``RLPROF_HOOK_TIMEOUT_S`` is reported by the watchdog, while
      training waits for it (``on_timeout``);
    * what a call returned or added is handed to ``on_result``.

    ``RLPROF_TRACE_HOOKS=1`` prints every call to stderr.
    """

    def __init__(self, names: Iterable[str], *, rank: int = 0, on_error: Callable[..., None] | None = None,
                 instances: Mapping[str, Any] | None = None):
        self.rank = rank
        self.names = tuple(names)
        self.strict = os.environ.get("RLPROF_STRICT", "") not in ("", "0")
        self.trace = os.environ.get("RLPROF_TRACE_HOOKS", "") not in ("", "0")
        self.failed: dict[str, str] = {}
        """Backend -> the hook it first raised in; skipped for new work from then on."""
        self.newly_failed: list[str] = []
        """Backends that failed since the session last released (it empties this)."""
        self.run: Any = None
        """The :class:`~rlprof.context.RunInfo` every context carries (set by the session)."""
        self._on_error = on_error
        self.on_result: Callable[[str, str, Any, Any], None] | None = None
        """``(backend, hook, ctx, result)`` for a call that returned something or added artifacts."""
        self.on_timeout: Callable[[str, str, int, float, str], None] | None = None
        self.pm = plugin_manager()
        eps = discover() if instances is None else {}
        self.plugins: dict[str, Any] = {}
        for name in self.names:
            plugin = instances[name] if instances is not None else load_backend(name, eps)
            self.plugins[name] = plugin
            self.pm.register(plugin, name=name)
        self.pm.check_pending()
        self.impls: dict[str, list[_Impl]] = {}
        """Hook name -> implementations in ``names`` order."""
        order = {n: i for i, n in enumerate(self.names)}
        for hook in HOOKS:
            caller = getattr(self.pm.hook, hook)
            impls = [_Impl(impl.plugin_name, impl.function, tuple(impl.argnames)) for impl in caller.get_hookimpls()]
            impls.sort(key=lambda i: order.get(i.backend, 0))
            self.impls[hook] = impls
        self.watchdog: Any = None
        """The hook watchdog once :meth:`start_watchdog` ran (the process session starts it; one-off
        users such as ``rlprof check`` call hooks unwatched)."""

    def start_watchdog(self) -> None:
        """Watch every later hook call (``RLPROF_HOOK_TIMEOUT_S``); :meth:`close` stops it."""
        if self.watchdog is None:
            self.watchdog = _watchdog(self._timed_out)

    def has(self, hook: str) -> bool:
        return bool(self.impls[hook])

    # ------------------------------------------------------------------ the typed lifecycle facade

    def start_step(self, configs: Mapping[str, Mapping[str, Any]], *, capture: Any, step: int, opens_capture: bool,
                   only: str | None = None) -> None:
        self._each("start_step", StepContext, configs, only, capture=capture, step=step, opens_capture=opens_capture)

    def start_role(self, configs: Mapping[str, Mapping[str, Any]], *, capture: Any, step: int, role: str, region: str,
                   opens_capture: bool, iterations: tuple[int, int] | None, only: str | None = None) -> None:
        self._each("start_role", RoleContext, configs, only, capture=capture, step=step, role=role, region=region,
                   opens_capture=opens_capture, iterations=iterations)

    def iteration_boundary(self, configs: Mapping[str, Mapping[str, Any]], *, capture: Any, step: int, role: str,
                           region: str, iteration: int, only: str | None = None) -> None:
        self._each("iteration_boundary", IterationContext, configs, only, capture=capture, step=step, role=role,
                   region=region, iteration=iteration)

    def stop_role(self, configs: Mapping[str, Mapping[str, Any]], *, capture: Any, step: int, role: str, region: str,
                  closes_capture: bool, iterations: tuple[int, int] | None, error: BaseException | None,
                  only: str | None = None) -> None:
        self._each("stop_role", RoleContext, configs, only, capture=capture, step=step, role=role, region=region,
                   closes_capture=closes_capture, iterations=iterations, error=error)

    def step_boundary(self, configs: Mapping[str, Mapping[str, Any]], *, capture: Any, step: int, closes_capture: bool,
                      ends_step: bool, only: str | None = None) -> None:
        self._each("step_boundary", StepContext, configs, only, capture=capture, step=step, closes_capture=closes_capture,
                   ends_step=ends_step)

    def finalize(self, configs: Mapping[str, Mapping[str, Any]], *, reason: str, profiled_steps: tuple[int, ...],
                 relocate_results: bool, only: str | None = None) -> None:
        self._each("finalize", FinalizeContext, configs, only, capture=None, reason=reason,
                   profiled_steps=profiled_steps, relocate_results=relocate_results)

    def _each(self, hook: str, context_class: type, configs: Mapping[str, Mapping[str, Any]], only: str | None,
              **fields: Any) -> None:
        """Call ``hook`` on every backend not failed (or on ``only``, failed or not), each with its own context."""
        for impl in self.impls[hook]:
            backend = impl.backend
            if only is None:
                if backend in self.failed:
                    continue
            elif backend != only:
                continue
            ctx = context_class(run=self.run, backend=backend, tool_config=configs.get(backend, _EMPTY), **fields)
            result = self.invoke(impl, hook, ctx)
            if (result is not None or ctx._artifacts) and self.on_result is not None:
                self.on_result(backend, hook, ctx, result)

    # ------------------------------------------------------------------ single calls

    def call_one(self, backend: str, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on one backend only, isolated. Returns its result, or None if it failed."""
        for impl in self.impls[hook]:
            if impl.backend == backend:
                return self._invoke(impl, hook, kwargs)
        return None

    def check_environment(self, backend: str) -> list[str]:
        """What ``backend`` lacks on this machine. A check that raises or returns something else is
        reported through ``on_error`` (kind ``environment``) and counts as one problem; it never
        disables the backend (a problem here is a warning, never a failure of the run)."""
        for impl in self.impls["check_environment"]:
            if impl.backend != backend:
                continue
            try:
                problems = self._watched(impl, "check_environment", {})
            except Exception as exc:
                if self.strict:
                    raise
                message = f"check_environment raised {type(exc).__name__}: {exc}"
                log.error("rlprof: backend %r: %s", backend, message)
                if self._on_error is not None:
                    self._on_error(backend, "check_environment", exc, "environment")
                return [message]
            if problems is None:
                return []
            if isinstance(problems, str) or not isinstance(problems, (list, tuple)):
                problems = [f"check_environment returned {problems!r} instead of a list of strings"]
            return [str(p) for p in problems]
        return []

    def validated_tool_config(self, backend: str, role) -> dict[str, Any]:
        """``role``'s ``tool_config.<backend>`` section (a :class:`~rlprof.config.RoleConfig`), checked
        and normalised by the backend's ``validate_tool_config``; the section as written when the
        backend does not validate. The one place the core asks a backend about a role's config.

        :raises ConfigError: the backend rejected it, or its check itself failed (named as such)."""
        raw = dict(role.tool_config.get(backend, {}))
        return self.validated_section(backend, raw, f"{role.key_path}.tool_config.{backend}")

    def validated_section(self, backend: str, raw: Mapping[str, Any], key: str) -> dict[str, Any]:
        """One ``tool_config`` section checked by ``backend`` under its own key path (a role's section,
        or ``global_profiler.global_tool_config.<backend>``).

        :raises ConfigError: the backend rejected it, or its check itself failed (named as such)."""
        try:
            result = self.call_one(backend, "validate_tool_config", tool_config=dict(raw), key_path=key)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"{key}: backend {backend!r} failed to validate it: {type(exc).__name__}: {exc}", key=key) from exc
        return dict(result) if result is not None else dict(raw)

    def invoke(self, impl: _Impl, hook: str, ctx: Any) -> Any:
        """Call one lifecycle hookimpl with its context object (the hot path of every region)."""
        if impl.argnames == ("ctx",) and not self.trace:
            try:
                if self.watchdog is None:
                    return impl.function(ctx)
                return self.watchdog.call(impl.backend, hook, self.rank, impl.function, ctx)
            except Exception as exc:
                return self._failed(impl, hook, exc)
        return self._invoke(impl, hook, {"ctx": ctx})

    def _invoke(self, impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> Any:
        try:
            return self._watched(impl, hook, kwargs)
        except Exception as exc:
            return self._failed(impl, hook, exc)

    def _watched(self, impl: _Impl, hook: str, kwargs: Mapping[str, Any]) -> Any:
        if self.trace:
            shown = {k: getattr(v, "region", None) or getattr(v, "step", None) or v for k, v in kwargs.items()}
            print(f"rlprof[{os.getpid()} rank{self.rank}] {impl.backend}.{hook}({shown})", file=sys.stderr)
        arguments = {name: kwargs[name] for name in impl.argnames}
        if self.watchdog is None:
            return impl.function(**arguments)
        with self.watchdog.watch(impl.backend, hook, self.rank):
            return impl.function(**arguments)

    def _failed(self, impl: _Impl, hook: str, exc: Exception) -> None:
        if self.strict or hook == "validate_tool_config":
            raise exc
        backend = impl.backend
        if backend not in self.failed:
            self.failed[backend] = hook
            self.newly_failed.append(backend)
            log.error(
                "rlprof: backend %r failed in %s on rank %d; it is skipped for the rest of the run (the core closes what "
                "it had open and finalizes it), training goes on:\n%s",
                backend, hook, self.rank, "".join(traceback.format_exception(exc)),
            )
        else:  # while being released: said once above already
            log.warning("rlprof: backend %r also failed in %s on rank %d while being released: %s: %s",
                        backend, hook, self.rank, type(exc).__name__, exc)
        if self._on_error is not None:
            self._on_error(backend, hook, exc, "hook")
        return None

    def _timed_out(self, backend: str, hook: str, rank: int, elapsed_s: float, stack: str) -> None:
        if self.on_timeout is not None:
            self.on_timeout(backend, hook, rank, elapsed_s, stack)

    def close(self) -> None:
        """Stop the watchdog's thread (after the last hook call of the session)."""
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            watchdog.close()


_EMPTY: Mapping[str, Any] = {}


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
