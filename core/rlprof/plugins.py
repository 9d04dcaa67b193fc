"""Loading a plugin: the one way rlprof imports an entry point, checks it and says what is wrong.

When: every extension point goes through here: a backend a config selects (``runtime.registry``), an
engine adapter (``integrations.engines.contract``), and the hooks called outside a profiling process
(``report_details``, ``after_exit``, ``cli_commands``, ``trace_reader``: ``rlprof report``, the Ray
controller's after-exit step, the ``rlprof`` command line, the breakdown), together with the
entry-point groups those hooks replace.

Why one: five loaders had grown five contract rules and five error texts. Here there is one of each:

* **the import is guarded**: a plugin that fails to import, or whose object cannot be created, is a
  :class:`PluginError`, never a traceback through the caller;
* **one contract rule**: an object declaring (``rlprof_contract``) a contract its kind does not speak
  is refused (:class:`ContractRefused`); one declaring none is taken as the current contract, and that
  is said once per process (:mod:`rlprof.notices`);
* **one message shape**: ``<kind> "<name>" (<distribution> <version>): <what is wrong>``, e.g.
  ``backend "torch" (rlprof-torch 0.1.0): import failed: ImportError: ...``.

A leaf: it reads package metadata, imports only the entry point asked for, and knows the hook spec
(:mod:`rlprof.hookspecs`), so ``analysis`` may use it too.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable, Iterable, Mapping

import pluggy

from rlprof import hookspecs, notices
from rlprof.errors import BackendError
from rlprof.installed import GROUP as BACKENDS_GROUP
from rlprof.installed import discover, distribution_of

log = logging.getLogger("rlprof")


@dataclass(frozen=True)
class Kind:
    """What one entry-point group holds, and the rule its objects are loaded by."""

    label: str
    """How messages name one (``backend``, ``engine adapter``)."""
    group: str
    """The entry-point group."""
    key: str
    """The config key a :class:`PluginError` of this kind names (:attr:`rlprof.errors.ConfigError.key`)."""
    contract: int | None = None
    """The contract this core speaks for the kind (None: plain functions, no contract)."""
    supported: tuple[int, ...] = ()
    """Declared contracts still loaded; any other is refused."""
    contract_name: str = "hook contract"
    required: tuple[str, ...] = ()
    """Methods the object must have (an engine adapter's ``start``, ``stop``, ...)."""
    instantiate: bool = True
    """A class found at the entry point is instantiated without arguments."""


BACKEND = Kind("backend", BACKENDS_GROUP, "global_profiler.tool", hookspecs.CONTRACT, hookspecs.SUPPORTED_CONTRACTS)


class PluginError(BackendError):
    """A plugin that cannot be used: one line, ``<kind> "<name>" (<distribution> <version>): <what>``."""


class ContractRefused(PluginError):
    """A plugin declares a contract this core no longer speaks (refused at load)."""


@dataclass(frozen=True)
class Plugin:
    """One loaded entry point."""

    kind: Kind
    name: str
    distribution: str
    version: str
    obj: Any
    """The object the entry point names (instantiated when :attr:`Kind.instantiate` and it is a class)."""
    contract: int | None
    declared: bool
    """Whether the object declared its contract (else :attr:`contract` is the current one, assumed)."""

    def problem(self, what: str) -> str:
        return problem(self.kind.label, self.name, self.distribution, self.version, what)


def problem(label: str, name: str, distribution: str, version: str, what: str) -> str:
    """The one shape of every message about a plugin."""
    return f'{label} "{name}" ({distribution} {version}): {what}'


def load(kind: Kind, name: str, ep: metadata.EntryPoint) -> Plugin:
    """Import ``ep`` (named ``name`` in ``kind``'s group), apply the contract rule, check the required
    methods and create the object.

    :raises ContractRefused: a declared contract ``kind`` does not speak.
    :raises PluginError: the import or the creation failed, or a required method is missing."""
    dist, version = distribution_of(ep)

    def fail(what: str, error: type[PluginError] = PluginError) -> PluginError:
        return error(problem(kind.label, name, dist, version, what), key=kind.key)

    try:
        obj = ep.load()
    except Exception as exc:
        raise fail(f"import failed: {type(exc).__name__}: {exc} (entry point {ep.value})") from exc
    contract, declared = contract_of(kind, obj, name, dist, version)
    if kind.instantiate and isinstance(obj, type):
        try:
            obj = obj()
        except Exception as exc:
            raise fail(f"creating it failed: {type(exc).__name__}: {exc} (entry point {ep.value})") from exc
    missing = [method for method in kind.required if not callable(getattr(obj, method, None))]
    if missing:
        raise fail(f"does not implement: {', '.join(missing)}")
    return Plugin(kind, name, dist, version, obj, contract, declared)


def contract_of(kind: Kind, obj: Any, name: str, dist: str = "?", version: str = "?") -> tuple[int | None, bool]:
    """``(contract, declared)`` of a plugin object (its attribute ``rlprof_contract``), by the one rule:
    no declaration is taken as ``kind``'s current contract, said once per process; a declaration
    ``kind`` does not speak is refused.

    :raises ContractRefused: naming the plugin, its distribution and version, both contracts and
        docs/migration.md."""
    if kind.contract is None:
        return None, False
    declared = getattr(obj, "rlprof_contract", None)
    if declared is None:
        notices.say_once(f"undeclared contract: {kind.group} {name}", log,
                         "rlprof: %s; its author should add rlprof_contract = %d to it (docs/migration.md)",
                         problem(kind.label, name, dist, version, f"declares no {kind.contract_name}; taken as "
                                 f"{kind.contract_name} {kind.contract}"), kind.contract)
        return kind.contract, False
    if isinstance(declared, bool) or not isinstance(declared, int) or declared not in kind.supported:
        raise ContractRefused(problem(
            kind.label, name, dist, version,
            f"was written for rlprof {kind.contract_name} {declared!r}, which this rlprof no longer speaks (it speaks "
            f"contract {kind.contract}; supported: {', '.join(map(str, kind.supported))}); update it, or ask its "
            f"author to, following docs/migration.md"), key=kind.key)
    return declared, True


# ----------------------------------------------------------------------------- hooks of one object


def plugin_manager() -> pluggy.PluginManager:
    """A fresh manager with the spec loaded; one per Profiler or per use (no global state)."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def implemented_hooks(obj: Any) -> list[str]:
    """The hooks of the spec that ``obj`` implements, in spec order (``rlprof backends`` lists them).

    :raises pluggy.PluginValidationError: it does not register (a hook argument the spec lacks)."""
    pm = plugin_manager()
    pm.register(obj)
    return [hook for hook in hookspecs.HOOKS if getattr(pm.hook, hook).get_hookimpls()]


ARGUMENTS: dict[str, tuple[str, ...]] = {hook: tuple(inspect.signature(getattr(hookspecs, hook)).parameters)
                                        for hook in hookspecs.HOOKS}
"""Hook -> the argument names its spec takes, in order (what pluggy would hand an implementation, by name)."""


def adapted(function: Callable[..., Any], argnames: tuple[str, ...], hook: str) -> Callable[[Any], Any]:
    """``function`` (an implementation of ``hook`` naming ``argnames``) as a call of one value: the one
    way rlprof calls a hook implementation, whatever the hook (in a profiling process through
    :class:`rlprof.runtime.registry.Backends`, outside one through :func:`hook_call`).

    A call carries its arguments as one value (:func:`call_value`): the context itself where the spec
    takes ``ctx`` alone (every lifecycle hook, on the training's hot path: an implementation naming
    ``ctx`` is called as it is, nothing in between), else a mapping of the spec's argument names. Each
    implementation gets only the arguments it names, as pluggy's ``_multicall`` hands them (pluggy passes
    no defaults); so a new hook, whatever it takes, needs no new calling code."""
    if ARGUMENTS[hook] == ("ctx",):
        return function if argnames == ("ctx",) else lambda ctx: function()
    return lambda arguments: function(**{name: arguments[name] for name in argnames})


def call_value(hook: str, arguments: Mapping[str, Any]) -> Any:
    """The one value a call of ``hook`` with these keyword ``arguments`` carries (:func:`adapted`)."""
    return arguments["ctx"] if ARGUMENTS[hook] == ("ctx",) else arguments


def hook_call(obj: Any, hook: str, *, check_pending: bool = True) -> Callable[..., Any] | None:
    """``obj``'s implementation of ``hook``, to be called with the spec's keywords (each passed only if
    the implementation names it, as pluggy does: :func:`adapted`); None when it does not implement it.

    :raises pluggy.PluginValidationError: it does not register, or (``check_pending``) implements a
        hook the spec does not have (a misspelled name; the conformance kit reports that on its own)."""
    pm = plugin_manager()
    pm.register(obj)
    if check_pending:
        pm.check_pending()
    impls = getattr(pm.hook, hook).get_hookimpls()
    if not impls:
        return None
    call = adapted(impls[0].function, tuple(impls[0].argnames), hook)
    return lambda **kwargs: call(call_value(hook, kwargs))


def hook_of(plugin: Plugin, hook: str) -> Callable[..., Any] | None:
    """:func:`hook_call` for a loaded plugin, a registration failure said in the loader's shape.

    :raises PluginError: the object does not register (a misspelled hook or argument name)."""
    try:
        return hook_call(plugin.obj, hook)
    except Exception as exc:  # pluggy.PluginValidationError
        raise PluginError(plugin.problem(f"does not register: {exc}"), key=plugin.kind.key) from exc


# ----------------------------------------------------------------------------- hooks outside a run


@dataclass(frozen=True)
class Implementation:
    """One implementation of a hook called outside a run: a backend's, or a deprecated group's entry."""

    owner: str
    """The backend's name (or the deprecated entry point's)."""
    distribution: str
    version: str
    call: Callable[..., Any]
    """Called with the spec's keywords (``path=``, ``run_dirs=``; nothing for ``cli_commands``)."""
    label: str = "backend"

    def problem(self, what: str) -> str:
        return problem(self.label, self.owner, self.distribution, self.version, what)


@dataclass(frozen=True)
class _Deprecated:
    """An entry-point group a hook replaced (its :class:`Kind`), and how one of its entries becomes the hook's call."""

    kind: Kind
    adapt: Callable[[Any, str], Callable[..., Any]]
    """``(the entry's function, its entry-point name) -> a call taking the hook's keywords``."""
    named_for_backend: bool = True
    """Entries are named as the backend they serve (so a backend's own hook wins); else as what they add."""


def _summary(function: Any) -> str:
    doc = (getattr(function, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else "(its author wrote no help line)"


def _deprecated(label: str, group: str, adapt: Callable[[Any, str], Callable[..., Any]],
                named_for_backend: bool = True) -> _Deprecated:
    return _Deprecated(Kind(label, group, key=group, instantiate=False), adapt, named_for_backend)


DEPRECATED: dict[str, _Deprecated] = {
    "report_details": _deprecated("report details", "rlprof.report_details",
                                  lambda function, name: lambda path: function(path)),
    "after_exit": _deprecated("after-exit hook", "rlprof.after_exit",
                              lambda function, name: lambda run_dirs: function(run_dirs)),
    "cli_commands": _deprecated("command", "rlprof.commands",
                                lambda function, name: lambda: {name: hookspecs.CliCommand(_summary(function), function)},
                                named_for_backend=False),
}
"""Hook -> the entry-point group it replaces (still read, with one deprecation message per distribution).
An entry there is a plain function taking the hook's one argument (``rlprof.commands``: ``main(argv)``,
its docstring's first line the help)."""


def implementations(hook: str, names: Iterable[str] | None = None) -> tuple[list[Implementation], list[tuple[str, str]]]:
    """Every installed backend's implementation of ``hook`` (one of :data:`hookspecs.OUTSIDE_A_RUN`),
    then the entries of the deprecated group it replaces for names no backend answered; only
    ``names`` when given. Imports only those.

    :returns: ``(implementations, problems)``: a backend or entry that cannot be loaded is left out
        and named in ``problems`` as ``(name, line)``, the line in the loader's shape (the caller shows it)."""
    wanted = None if names is None else set(names)
    found: list[Implementation] = []
    problems: list[tuple[str, str]] = []
    for name, ep in sorted(discover().items()):
        if wanted is not None and name not in wanted:
            continue
        try:
            plugin = load(BACKEND, name, ep)
            call = hook_of(plugin, hook)
        except PluginError as exc:
            problems.append((name, str(exc)))
            continue
        if call is not None:
            found.append(Implementation(name, plugin.distribution, plugin.version, call))
    deprecated = DEPRECATED.get(hook)
    if deprecated is None:  # a hook that replaced no group (trace_reader)
        return found, problems
    answered = {i.owner for i in found} if deprecated.named_for_backend else set()
    for name, ep in sorted(discover(deprecated.kind.group).items()):
        if name in answered or (wanted is not None and name not in wanted):
            continue
        try:
            plugin = load(deprecated.kind, name, ep)
        except PluginError as exc:
            problems.append((name, str(exc)))
            continue
        _say_deprecated(deprecated.kind.group, hook, plugin)
        found.append(Implementation(name, plugin.distribution, plugin.version, deprecated.adapt(plugin.obj, name),
                                    deprecated.kind.label))
    return found, problems


def _say_deprecated(group: str, hook: str, plugin: Plugin) -> None:
    notices.say_once(
        f"deprecated group: {group} {plugin.distribution}", log,
        "rlprof: %s %s registers entry points in the group %s, which is deprecated: implement the %s hook "
        "(@rlprof.hookimpl) on its backend class, registered once in rlprof.backends, and drop the group "
        "(docs/migration.md, 'Entry-point groups to hooks')",
        plugin.distribution, plugin.version, group, hook)
