"""Backend discovery through the ``rlprof.backends`` entry-point group, and the typed facade over pluggy.

Only the backends the config selects are imported (a broken unrelated plugin cannot break a run),
through the one plugin loader (:mod:`rlprof.plugins`): a failing import names the backend, its
distribution and version. Every hook implementation is
called on its own (:class:`Backends`), so one raising backend loses nobody else's data.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from typing import Any, Callable, Iterable, Mapping

import pluggy

from rlprof import context, hookspecs, plugins
from rlprof.errors import BackendError, ConfigError
from rlprof.installed import discover, distribution_of, not_installed_error
from rlprof.plugins import ARGUMENTS, ContractRefused, adapted, call_value, implemented_hooks, plugin_manager  # noqa: F401 (callers import them here)
from rlprof.runtime.groups import StepGroups

HOOKS = hookspecs.HOOKS
"""Every hook of the spec, in spec order."""
CONTEXT_CLASSES: dict[str, type] = {
    hook: getattr(context, getattr(hookspecs, hook).__annotations__["ctx"])
    for hook in HOOKS if "ctx" in getattr(hookspecs, hook).__annotations__}
"""Hook -> the context class its spec types ``ctx`` with (the annotations are names: postponed evaluation)."""
LIFECYCLE = tuple(hook for hook in CONTEXT_CLASSES if issubclass(CONTEXT_CLASSES[hook], context.HookContext))
"""The hooks of a capture's life (their ``ctx`` is a :class:`~rlprof.context.HookContext`), in spec order."""

log = logging.getLogger("rlprof")


def load_backend(name: str, eps: Mapping[str, metadata.EntryPoint] | None = None) -> Any:
    """The backend ``name``, loaded by the one plugin loader (:func:`rlprof.plugins.load`: guarded import,
    the contract rule, one message shape) and instantiated.

    :raises BackendError: not installed, the import or creation failed, or (:class:`ContractRefused`)
        the backend declares a contract the core no longer speaks."""
    eps = discover() if eps is None else eps
    if name not in eps:
        raise not_installed_error(name, eps)
    return plugins.load(plugins.BACKEND, name, eps[name]).obj


def contract_of(obj: Any, name: str, dist: str = "?", version: str = "?") -> tuple[int, bool]:
    """``(contract, declared)`` of a backend object, by the loader's one contract rule
    (:func:`rlprof.plugins.contract_of`).

    :raises ContractRefused: a declared contract the core no longer speaks (or not an int)."""
    contract, declared = plugins.contract_of(plugins.BACKEND, obj, name, dist, version)
    return int(contract or hookspecs.CONTRACT), declared


_ORDERING_OPTIONS = ("tryfirst", "trylast", "hookwrapper", "wrapper")


def refuse_ordering_options(pm: pluggy.PluginManager, name: str) -> None:
    """Refuse a hookimpl of backend ``name`` marked ``tryfirst``/``trylast``/``hookwrapper``/``wrapper``.

    The core calls every backend's implementation on its own, in ``global_profiler.tool`` order (one
    raising backend must not stop the others), not through pluggy's call loop, so those markers would
    be silently ignored (ordering) or misread (a wrapper's generator taken for a bad return value).

    :raises BackendError: naming the backend, the hook and the marker (like a failing import)."""
    for impl in pm.get_hookcallers(pm.get_plugin(name)) or ():
        for hookimpl in impl.get_hookimpls():
            if hookimpl.plugin_name != name:
                continue
            used = [option for option in _ORDERING_OPTIONS if getattr(hookimpl, option, False)]
            if used:
                raise BackendError(
                    f'backend "{name}": its {impl.name} hookimpl is marked {", ".join(f"{o}=True" for o in used)}; '
                    f"rlprof calls each backend's hooks on its own, in global_profiler.tool order, so it cannot honour "
                    f"that; allowed: a plain @rlprof.hookimpl", key="global_profiler.tool")


@dataclass
class _Impl:
    backend: str
    function: Callable[..., Any]
    argnames: tuple[str, ...]
    call: Callable[[Any], Any]
    """The implementation adapted to the one value every call carries (:func:`rlprof.plugins.adapted`)."""


def _traced(call: Callable[[Any], Any], prefix: str, hook: str) -> Callable[[Any], Any]:
    """``call`` printing ``<prefix>({argument: shown})`` to stderr first (``RLPROF_TRACE_HOOKS``): a
    context is shown by its region or step, like any argument that has one."""
    single = ARGUMENTS[hook] == ("ctx",)

    def traced(value: Any) -> Any:
        arguments = {"ctx": value} if single else value
        shown = {k: getattr(v, "region", None) or getattr(v, "step", None) or v for k, v in arguments.items()}
        print(f"{prefix}({shown})", file=sys.stderr)
        return call(value)

    return traced


def _watchdog(report: Callable[[str, str, int, float, str], None]) -> Any:
    """The session's :class:`rlprof.runtime.watchdog.HookWatchdog` (limit ``RLPROF_HOOK_TIMEOUT_S``), or None when off."""
    from rlprof.runtime.watchdog import HookWatchdog, limit_from_env

    limit = limit_from_env()
    return HookWatchdog(limit, report) if limit is not None else None


class Backends:
    """The selected backends of one process session: a typed facade over pluggy with one method per
    hook the capture state machine calls (tox's plugin manager style), and :meth:`call` for every
    other hook; each call isolated and watched.

    Every hook is called the one same way (pluggy's ``_multicall`` in spirit): each implementation is
    adapted once, at load, to the arguments it names (:func:`rlprof.plugins.adapted`), traced there once when
    ``RLPROF_TRACE_HOOKS`` is set, and called through :meth:`_run` under the watchdog. A method that
    calls a lifecycle hook builds each backend's own context (its name, its validated tool_config
    from ``configs``) and calls the backends in ``names`` order, each on its own:

    * a backend that raises is logged once (backend, hook, rank, traceback), reported through
      ``on_error`` (the manifest), put in :attr:`failed` and skipped for new work; ``on_failed`` then
      lets the session release it (closing calls through ``only=``, and ``finalize`` once).
      ``strict=True`` (env ``RLPROF_STRICT=1``) re-raises instead;
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
        self.contain = False
        """A ``validate_tool_config`` that crashes releases its backend instead of raising (set by the process
        session: a profiling run goes on with the other backends; ``rlprof check`` leaves it off and reports it)."""
        self.on_failed: Callable[[str], None] | None = None
        """Called with a backend's name right after its first failure (the session releases it then)."""
        self.primary: Mapping[str, Mapping[str, Any]] = _EMPTY
        """Tool configs for step-level calls (the first selected role's; set by the session)."""
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
            refuse_ordering_options(self.pm, name)
        self.pm.check_pending()
        self.reads_module = any(getattr(plugin, "reads_module", False) is True for plugin in self.plugins.values())
        """A backend declares ``reads_module = True``: it reads the region's model (``ctx.module``), so
        integrations that must look the model up (the verl drop-in) do so, and only then."""
        self.impls: dict[str, list[_Impl]] = {}
        """Hook name -> implementations in ``names`` order, each adapted to the call's one value."""
        order = {n: i for i, n in enumerate(self.names)}
        for hook in HOOKS:
            impls = []
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                call = adapted(impl.function, tuple(impl.argnames), hook)
                if self.trace:
                    call = _traced(call, f"rlprof[{os.getpid()} rank{self.rank}] {impl.plugin_name}.{hook}", hook)
                impls.append(_Impl(impl.plugin_name, impl.function, tuple(impl.argnames), call))
            impls.sort(key=lambda i: order.get(i.backend, 0))
            self.impls[hook] = impls
        self._calls: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {
            hook: [(impl.backend, impl.call) for impl in impls] for hook, impls in self.impls.items()}
        """Hook -> ``(backend, call(value))`` in ``names`` order: what the methods below loop over."""
        self.groups = StepGroups()
        """Which closes end a group of captures (``ctx.ends_group``): the core's step grouping."""
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
    #
    # One method per hook the capture state machine calls (rlprof.runtime.capture_machine: it is the machine's
    # hooks object). Each builds every called backend's context with the constructor of the class the
    # spec names, the class's own fields by keyword; :meth:`_callees` says whom to call and
    # :meth:`_call` calls one. ``region`` is the machine's OpenRegion (its role, name and the role's
    # configs); step-level calls use :attr:`primary` configs. ``only``: call that backend alone,
    # failed or not (the session releasing it). A loop per method, not one generic loop taking the
    # fields as a tuple or a mapping: keyword calls keep each field named, and on this hot path (two
    # calls per profiled region) a closure or a ``**fields`` mapping per call would cost more than
    # the dispatch it serves (bench/bench_core.py). Any other hook, a new one included, goes through
    # :meth:`call`, which builds its context from the spec's annotation.

    def start_step(self, step: int, capture: Any, opens: bool, only: str | None = None) -> None:
        for backend, call in self._callees("start_step", only):
            tool_config = self.primary.get(backend, _EMPTY)
            self._call(backend, "start_step", call, context.step_context(
                self.run, backend, tool_config, capture, (),
                step=step, opens_capture=opens, closes_capture=False, ends_step=True))

    def start_role(self, region: Any, step: int, capture: Any, opens: bool, iterations: tuple[int, int] | None,
                   only: str | None = None) -> None:
        for backend, call in self._callees("start_role", only):
            tool_config = region.configs.get(backend, _EMPTY)
            self._call(backend, "start_role", call, context.role_context(
                self.run, backend, tool_config, capture, (),
                step=step, role=region.role, region=region.name, opens_capture=opens, closes_capture=False,
                iterations=iterations, error=None, module=region.module))

    def iteration_boundary(self, region: Any, step: int, capture: Any, iteration: int, only: str | None = None) -> None:
        for backend, call in self._callees("iteration_boundary", only):
            tool_config = region.configs.get(backend, _EMPTY)
            self._call(backend, "iteration_boundary", call, context.iteration_context(
                self.run, backend, tool_config, capture, (),
                step=step, role=region.role, region=region.name, iteration=iteration))

    def stop_role(self, region: Any, step: int, capture: Any, closes: bool, iterations: tuple[int, int] | None,
                  error: BaseException | None, only: str | None = None) -> None:
        for backend, call in self._callees("stop_role", only):
            tool_config = region.configs.get(backend, _EMPTY)
            ends_group = self.groups.close(backend, tool_config, capture) if closes else ()
            self._call(backend, "stop_role", call, context.role_context(
                self.run, backend, tool_config, capture, ends_group,
                step=step, role=region.role, region=region.name, opens_capture=False, closes_capture=closes,
                iterations=iterations, error=error, module=region.module))

    def step_boundary(self, step: int, capture: Any, closes: bool, ends_step: bool, only: str | None = None) -> None:
        for backend, call in self._callees("step_boundary", only):
            tool_config = self.primary.get(backend, _EMPTY)
            ends_group = self.groups.close(backend, tool_config, capture) if closes else ()
            self._call(backend, "step_boundary", call, context.step_context(
                self.run, backend, tool_config, capture, ends_group,
                step=step, opens_capture=False, closes_capture=closes, ends_step=ends_step))

    def finalize(self, reason: str, profiled_steps: tuple[int, ...], relocate_results: bool,
                 only: str | None = None) -> None:
        for backend, call in self._callees("finalize", only):
            tool_config = self.primary.get(backend, _EMPTY)
            self._call(backend, "finalize", call, context.finalize_context(
                self.run, backend, tool_config, None, self.groups.finish(backend, tool_config, None),
                reason=reason, profiled_steps=profiled_steps, relocate_results=relocate_results))

    def call(self, hook: str, *, only: str | None = None, **arguments: Any) -> dict[str, Any]:
        """Call ``hook`` on every backend that implements it, in ``names`` order, each on its own and
        watched (one raising fails that backend only, as in any lifecycle call), and return
        ``{backend: what it returned}`` (None for a backend that raised). The one caller a new hook
        needs: nothing here names it.

        For a hook whose spec types ``ctx`` with a :class:`~rlprof.context.HookContext`, ``arguments``
        are that class's own fields (``capture=`` and ``ends_group=`` too, when the call has them); each
        backend gets its own context (this session's run, its step-level tool_config), and what it
        returns or adds is listed like any lifecycle hook's (``on_result``). For any other hook,
        ``arguments`` are the spec's arguments by name. ``only``: that backend alone, failed or not."""
        cls = CONTEXT_CLASSES.get(hook)
        results: dict[str, Any] = {}
        if cls is None or not issubclass(cls, context.HookContext):
            for backend, call in self._callees(hook, only):
                results[backend] = self._isolated(backend, hook, call, arguments.get("ctx") if cls else arguments)
            return results
        capture, ends_group = arguments.pop("capture", None), tuple(arguments.pop("ends_group", ()))
        build = context.CONSTRUCTORS.get(cls) or partial(context.build, cls)
        for backend, call in self._callees(hook, only):
            ctx = build(self.run, backend, self.primary.get(backend, _EMPTY), capture, ends_group, **arguments)
            results[backend] = self._call(backend, hook, call, ctx)
        return results

    def _callees(self, hook: str, only: str | None) -> list[tuple[str, Callable[[Any], Any]]]:
        """``(backend, call(value))`` for each backend to call with ``hook`` now, in ``names`` order:
        every one that has not failed, or ``only`` that one (failed or not). While none failed, the
        list built at load (nothing allocated on the hot path)."""
        calls, failed = self._calls[hook], self.failed
        if only is None and not failed:
            return calls
        return [(backend, call) for backend, call in calls if (backend not in failed if only is None else backend == only)]

    def _run(self, backend: str, hook: str, call: Callable[[Any], Any], value: Any) -> Any:
        """The one way an implementation is called: ``call(value)`` (adapted at load to the arguments
        it names, traced there), watched by the watchdog. Raises what it raises: the callers below
        decide what a failure means (:meth:`_call` isolates it; :meth:`check_environment` and
        :meth:`validated_section` have rules of their own)."""
        watchdog = self.watchdog
        return call(value) if watchdog is None else watchdog.call(backend, hook, self.rank, call, value)

    def _call(self, backend: str, hook: str, call: Callable[[Any], Any], ctx: Any) -> Any:
        """One backend's lifecycle ``hook`` with ``ctx``, isolated (a raise fails that backend only) and
        watched; what it produced handed to ``on_result``. :meth:`_run`, inlined: this is the hot path."""
        watchdog = self.watchdog
        try:
            result = call(ctx) if watchdog is None else watchdog.call(backend, hook, self.rank, call, ctx)
        except Exception as exc:
            self._failed(backend, hook, exc)
            result = None  # what it added before it raised is still listed
        if (result is not None or ctx._artifacts or ctx._notes) and self.on_result is not None:
            self.on_result(backend, hook, ctx, result)
        return result

    def _isolated(self, backend: str, hook: str, call: Callable[[Any], Any], value: Any) -> Any:
        """:meth:`_run`, a raise failing that backend only (None returned)."""
        try:
            return self._run(backend, hook, call, value)
        except Exception as exc:
            return self._failed(backend, hook, exc)

    # ------------------------------------------------------------------ single calls

    def call_one(self, backend: str, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on one backend only, isolated. Returns its result, or None if it failed."""
        for impl in self.impls[hook]:
            if impl.backend == backend:
                return self._isolated(backend, hook, impl.call, call_value(hook, kwargs))
        return None

    def check_environment(self, backend: str) -> list[str]:
        """What ``backend`` lacks on this machine. A check that raises or returns something else is
        reported through ``on_error`` (kind ``environment``) and counts as one problem; it never
        disables the backend (a problem here is a warning, never a failure of the run)."""
        for impl in self.impls["check_environment"]:
            if impl.backend != backend:
                continue
            try:
                problems = self._run(backend, "check_environment", impl.call, {})
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

    def validated_global_section(self, backend: str, config) -> dict[str, Any] | None:
        """``global_profiler.global_tool_config.<backend>`` of ``config`` checked on its own key path
        (the core's keys such as ``_target_`` removed, as for a role's section); None when absent.

        :raises ConfigError: the backend rejected it (named by that key path)."""
        section = config.global_.global_tool_config.get(backend)
        if section is None:
            return None
        return self.validated_section(backend, dict(section), f"global_profiler.global_tool_config.{backend}")

    def validated_section(self, backend: str, raw: Mapping[str, Any], key: str) -> dict[str, Any]:
        """One ``tool_config`` section checked by ``backend`` under its own key path (a role's section,
        or ``global_profiler.global_tool_config.<backend>``).

        A backend that rejects the section raises a ConfigError: the run must not start with a config
        its backend refuses. A backend whose check itself crashes (anything but a ConfigError) is a bug
        of that backend: with ``contain`` (a profiling run) it is released like a backend that raised in
        any other hook — logged once, recorded, skipped from then on — and the other backends go on;
        without it (``rlprof check``) that is a ConfigError naming the crash.

        :raises ConfigError: the backend rejected it, or (without :attr:`contain`) its check failed."""
        # (the loaded config holds no core-owned keys such as discrete or _target_: rlprof.config guarantees it)
        impl = next((i for i in self.impls["validate_tool_config"] if i.backend == backend), None)
        if impl is None or backend in self.failed:
            return dict(raw)
        try:
            result = self._run(backend, "validate_tool_config", impl.call, {"tool_config": dict(raw), "key_path": key})
        except ConfigError:
            raise
        except Exception as exc:
            if not self.contain or self.strict:
                raise ConfigError(f"{key}: backend {backend!r} failed to validate it: {type(exc).__name__}: {exc}",
                                  key=key) from exc
            self._failed(backend, "validate_tool_config", exc)
            return dict(raw)
        return dict(result) if result is not None else dict(raw)

    def _failed(self, backend: str, hook: str, exc: Exception) -> None:
        if self.strict:
            raise exc
        first = backend not in self.failed
        if first:
            self.failed[backend] = hook
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
        if first and self.on_failed is not None:
            self.on_failed(backend)
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
        loaded = plugins.load(plugins.BACKEND, name, ep)
    except Exception as exc:
        info.update(imports=False, refused=isinstance(exc, ContractRefused), error=str(exc), hooks=[], problems=[])
        return info
    plugin = loaded.obj
    info["imports"] = True
    info["contract"], info["contract_declared"] = loaded.contract, loaded.declared
    info["import_ms"] = round((time.perf_counter() - started) * 1000, 1)
    info["hooks"] = implemented_hooks(plugin)
    try:  # asked the way a run asks it (a check that raises is one problem, never the listing's end)
        info["problems"] = Backends([name], instances={name: plugin}).check_environment(name)
    except Exception as exc:  # it does not register (a misspelled hook), or refuses an ordering marker
        info["problems"] = [str(exc)]
    return info
