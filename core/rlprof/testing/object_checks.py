"""The backend contract's checks of the backend object, before any run (:data:`rlprof.testing.contract.STATIC_CHECKS`):
it registers, its environment check and tool_config validation behave, what its outside-a-run hooks return
is usable. Each returns a list of problems in words (empty: the promise is kept)."""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rlprof.context import RuntimeEnvContext
from rlprof.errors import ConfigError
from rlprof.plugins import hook_call, implemented_hooks
from rlprof.runtime.registry import HOOKS, LIFECYCLE, plugin_manager

UNKNOWN_KEY = "rlprof_conformance_unknown_key"
"""The key slipped into tool_config: validate_tool_config must reject it."""
KEY_PATH = "actor_rollout_ref.actor.profiler.tool_config.{name}"


@dataclass
class Subject:
    """The backend object a static check looks at."""

    plugin: Any
    name: str
    tool_config: Mapping[str, Any]
    exercised: set[str] = field(default_factory=set)
    """Hooks the checks called: added to as they go."""


def implemented(plugin) -> list[str]:
    """The hooks ``plugin`` implements (empty when it cannot even be registered)."""
    try:
        return implemented_hooks(plugin)
    except Exception:
        return []


def _hook(subject: Subject, hook: str, note: bool = True):
    """The backend's implementation of ``hook``, called with keywords as pluggy would, or None.
    ``note``: count the hook as exercised."""
    try:
        call = hook_call(subject.plugin, hook, check_pending=False)
    except Exception:
        return None  # cannot even be registered: the registers check says why
    if call is not None and note:
        subject.exercised.add(hook)
    return call


def registers(subject: Subject) -> list[str]:
    """The core can register it (no misspelled hook or argument) and it implements a lifecycle hook."""
    pm = plugin_manager()
    try:
        pm.register(subject.plugin, name=subject.name)
        pm.check_pending()
    except Exception as exc:  # pluggy.PluginValidationError: an unknown hook or argument name
        return [f"the core cannot register it: {exc}. Hook methods marked @rlprof.hookimpl must use the names and "
                f"arguments of rlprof.hookspecs ({', '.join(HOOKS)}); is one misspelled?"]
    if not any(h in implemented(subject.plugin) for h in (*LIFECYCLE, "step_metrics")):
        return [f"it implements none of the lifecycle hooks ({', '.join(LIFECYCLE)}), so it can never capture "
                "anything, nor step_metrics (a sink of the run's metrics); did you forget the @rlprof.hookimpl marker?"]
    return []


def environment_check_is_quiet(subject: Subject) -> list[str]:
    """check_environment returns a list of strings and never raises."""
    call = _hook(subject, "check_environment")
    if call is None:
        return []
    try:
        problems = call()
    except Exception as exc:
        return [f"check_environment raised {type(exc).__name__}: {exc}; it must return what is missing as "
                f"strings and never raise\n{_short_traceback(exc)}"]
    if problems is None:
        return []
    if not isinstance(problems, (list, tuple)) or not all(isinstance(p, str) for p in problems):
        return [f"check_environment returned {problems!r}; it must return a list of strings (empty when all is well)"]
    return []


def tool_config_is_validated(subject: Subject) -> list[str]:
    """validate_tool_config returns a mapping for valid sections and rejects an unknown key by its path."""
    call = _hook(subject, "validate_tool_config")
    if call is None:
        return []
    key_path = KEY_PATH.format(name=subject.name)
    problems = []
    for config in ({}, subject.tool_config) if subject.tool_config else ({},):
        try:
            result = call(tool_config=dict(config), key_path=key_path)
        except Exception as exc:
            problems.append(f"validate_tool_config rejected the valid section {config!r}: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(result, Mapping):
            problems.append(f"validate_tool_config({config!r}) returned {result!r}; it must return the normalised "
                            "section as a mapping (the backend receives it later as ctx.tool_config)")
    bad = {**subject.tool_config, UNKNOWN_KEY: 1}
    try:
        call(tool_config=bad, key_path=key_path)
    except ConfigError as exc:
        if UNKNOWN_KEY not in str(exc) or key_path not in str(exc):
            problems.append(f"validate_tool_config rejected the unknown key {UNKNOWN_KEY!r} but its message does not "
                            f"name the key path {key_path}.{UNKNOWN_KEY}: {exc!s} (rlprof.tool_config.check_keys words it for you)")
    except Exception as exc:
        problems.append(f"validate_tool_config raised {type(exc).__name__} for the unknown key {UNKNOWN_KEY!r}; it must "
                        f"raise rlprof.ConfigError (rlprof.tool_config.check_keys does): {exc}")
    else:
        problems.append(f"validate_tool_config accepted the unknown key {UNKNOWN_KEY!r}; a typo in a user's config must "
                        "be an rlprof.ConfigError naming the key path (use rlprof.tool_config.check_keys)")
    return problems


def runtime_env_is_shippable(subject: Subject) -> list[str]:
    """worker_runtime_env returns None or a JSON-serialisable mapping, for workers with and without captures."""
    call = _hook(subject, "worker_runtime_env")
    if call is None:
        return []
    validate = _hook(subject, "validate_tool_config", note=False)
    try:
        config = validate(tool_config=dict(subject.tool_config), key_path=KEY_PATH.format(name=subject.name)) if validate else subject.tool_config
    except Exception:
        config = subject.tool_config  # reported by the validate_tool_config check
    problems = []
    for captures, expected in ((True, 2), (False, 0), (True, None)):
        ctx = RuntimeEnvContext(backend=subject.name, tool_config=dict(config or {}), rank=0, world_size=2,
                                roles=("actor", "ref"), captures=captures, expected_captures=expected)
        try:
            env = call(ctx=ctx)
        except Exception as exc:
            problems.append(f"worker_runtime_env raised {type(exc).__name__} for a worker with captures={captures}, "
                            f"expected_captures={expected}: {exc}\n{_short_traceback(exc)}")
            continue
        if env is None:
            continue
        if not isinstance(env, Mapping):
            problems.append(f"worker_runtime_env returned {env!r}; it must return a runtime_env mapping or None")
            continue
        try:
            json.dumps(env)
        except (TypeError, ValueError) as exc:
            problems.append(f"worker_runtime_env returned a mapping Ray cannot ship to a worker (not JSON-serialisable: {exc})")
    return problems


def commands_are_listable(subject: Subject) -> list[str]:
    """cli_commands returns command name -> CliCommand (a one-line summary, a callable), without raising."""
    from rlprof.hookspecs import CliCommand

    call = _hook(subject, "cli_commands")
    if call is None:
        return []
    try:
        offered = call()
    except Exception as exc:
        return [f"cli_commands raised {type(exc).__name__}: {exc}; `rlprof --help` would drop its commands\n"
                f"{_short_traceback(exc)}"]
    if not isinstance(offered, Mapping):
        return [f"cli_commands returned {offered!r}; it must return a mapping of command name -> rlprof.hookspecs.CliCommand"]
    problems = []
    for name, command in offered.items():
        if not isinstance(command, CliCommand) or not callable(command.run):
            problems.append(f"cli_commands: {name!r} maps to {command!r}, not a rlprof.hookspecs.CliCommand with a callable run")
        elif not command.summary.strip() or "\n" in command.summary:
            problems.append(f"cli_commands: {name!r} has the summary {command.summary!r}; `rlprof --help` needs one line")
    return problems


def trace_reader_imports(subject: Subject) -> list[str]:
    """trace_reader returns a TraceReader (or None) whose target imports and is callable, without raising."""
    import importlib

    from rlprof.hookspecs import TraceReader

    call = _hook(subject, "trace_reader")
    if call is None:
        return []
    try:
        reader = call()
    except Exception as exc:
        return [f"trace_reader raised {type(exc).__name__}: {exc}; the breakdown would not read its files\n"
                f"{_short_traceback(exc)}"]
    if reader is None:
        return []
    if not isinstance(reader, TraceReader) or isinstance(reader.patterns, str) or not reader.patterns:
        return [f"trace_reader returned {reader!r}; it must return a rlprof.hookspecs.TraceReader with a tuple "
                f"of file name patterns, or None"]
    if isinstance(reader.not_traces, str):
        return [f"trace_reader's not_traces is the string {reader.not_traces!r}; it must be a tuple of file name patterns"]
    module, _, attr = reader.target.partition(":")
    try:
        function = getattr(importlib.import_module(module), attr)
    except Exception as exc:
        return [f"trace_reader's target {reader.target!r} does not import: {type(exc).__name__}: {exc}"]
    return [] if callable(function) else [f"trace_reader's target {reader.target!r} is not callable"]


def outside_hooks_are_quiet(subject: Subject) -> list[str]:
    """report_details on a file that is not the backend's and after_exit on a run directory with nothing
    pending answer (lines; 0) without raising, as ``rlprof report`` and the Ray controller call them."""
    import tempfile

    problems = []
    with tempfile.TemporaryDirectory(prefix="rlprof-conformance-outside-") as scratch:
        other = Path(scratch) / "unrelated.bin"
        other.write_bytes(b"not a file this backend wrote")
        details = _hook(subject, "report_details")
        if details is not None:
            try:
                lines = details(path=other)
                if lines is not None and (isinstance(lines, str) or not all(isinstance(x, str) for x in lines)):
                    problems.append(f"report_details returned {lines!r}; it must return a list of strings or None")
            except Exception as exc:
                problems.append(f"report_details raised {type(exc).__name__} for a file it did not write: {exc}\n"
                                f"{_short_traceback(exc)}")
        after_exit = _hook(subject, "after_exit")
        if after_exit is not None:
            run_dir = Path(scratch) / "run"
            run_dir.mkdir()
            try:
                waiting = after_exit(run_dirs=[run_dir])
                if isinstance(waiting, bool) or not isinstance(waiting, int) or waiting != 0:
                    problems.append(f"after_exit returned {waiting!r} for a run directory with nothing pending; "
                                    "it must return how many files are still being written (0 here)")
            except Exception as exc:
                problems.append(f"after_exit raised {type(exc).__name__} for a run directory with nothing pending: "
                                f"{exc}\n{_short_traceback(exc)}")
    return problems


def step_metrics_are_taken(subject: Subject) -> list[str]:
    """step_metrics takes a step's metrics and an analysed step's split, as the drivers send them, without raising."""
    from rlprof.step_metrics import REGION_FIGURES, SPLIT_FIGURES, STEP_FIGURES, metric_name, split_metrics

    call = _hook(subject, "step_metrics")
    if call is None:
        return []
    step = {metric_name("", None, f): 0.5 for f in STEP_FIGURES}
    step.update({metric_name("actor", "actor_update", f): 0 if f.endswith("rank") else 0.25 for f in REGION_FIGURES})
    split = split_metrics(1, {("actor", "actor_update"): {f: 0.25 for f in SPLIT_FIGURES}})
    problems = []
    for metrics, step_number in ((step, 2), (split, 1)):
        try:
            call(step=step_number, metrics=metrics, run_id="rlprof-conformance")
        except Exception as exc:
            problems.append(f"step_metrics raised {type(exc).__name__} for step {step_number}'s metrics: {exc}; the run's "
                            f"driver would skip this backend from then on\n{_short_traceback(exc)}")
    return problems


def _short_traceback(exc: BaseException, lines: int = 8) -> str:
    text = "".join(traceback.format_exception(exc)).rstrip().splitlines()
    return "\n".join(text[-lines:])
