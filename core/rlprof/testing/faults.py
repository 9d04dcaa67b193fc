"""Fault injection for a scripted run, and the sandbox it plays in: a backend made to fail right after its own hook
(``Scenario.fail_after``), a fresh working and temporary directory, the hook watchdog's limit, the log it wrote."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from rlprof.runtime.registry import ARGUMENTS, HOOKS
from rlprof.testing.recorder import RecordingBackend, hook_function
from rlprof.testing.scenario_spec import InjectedFailure, ScriptedHookFailure

def _failing_after(plugin: Any, injected: InjectedFailure, recorder: RecordingBackend) -> Any:
    """A stand-in registered in place of ``plugin``: each hook calls the backend's own implementation;
    the first call of ``injected.hook`` then raises :class:`ScriptedHookFailure` (after listing what
    the call returned with ``ctx.add_artifact``, so nothing the backend wrote goes unlisted). Built from
    the spec, by argument names: a hook added to the spec later is stood in for like any other."""
    from rlprof.hookspecs import OUTSIDE_A_RUN
    from rlprof.runtime.registry import plugin_manager

    pm = plugin_manager()
    pm.register(plugin)
    stand_in = type(f"FailingAfter_{type(plugin).__name__}", (), {})()
    for hook in (h for h in HOOKS if h not in OUTSIDE_A_RUN):  # a run calls only these (never in a stand-in)
        impls = getattr(pm.hook, hook).get_hookimpls()
        if impls:
            setattr(stand_in, hook, _delegate(hook, impls[0].function, tuple(impls[0].argnames), injected, recorder))
    for name in ("rlprof_contract", "reads_module", "open_captures"):  # what the core and the kit read besides hooks
        if hasattr(plugin, name):
            setattr(stand_in, name, getattr(plugin, name))
    return stand_in


def _delegate(hook: str, function: Callable, argnames: tuple[str, ...], injected: InjectedFailure,
              recorder: RecordingBackend) -> Callable:
    """The stand-in's ``hook``: takes the spec's arguments, hands the backend's implementation the ones it
    names, and raises right after the first call of the injected hook."""
    names = ARGUMENTS[hook]

    def call(*arguments: Any) -> Any:
        given = dict(zip(names, arguments))
        ctx = given.get("ctx")
        if not injected.raised and getattr(ctx, "opens_capture", False):
            injected.captures.add(ctx.capture.capture_id)
        result = function(*(given[name] for name in argnames))
        if hook == injected.hook and not injected.raised:
            injected.raised = True
            injected.captures.update(recorder.open_captures())
            for path in _returned_paths(result):
                ctx.add_artifact(path)
            raise ScriptedHookFailure(f"scripted failure right after the backend's {hook} ran (step "
                                      f"{getattr(ctx, 'step', None)})")
        return result

    return hook_function(hook, call)


def _returned_paths(result: Any) -> list[Any]:
    if result is None:
        return []
    if isinstance(result, (str, os.PathLike)):
        return [result]
    return list(result)


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for path in directory.rglob("*"):
        if path.is_file():
            stat = path.stat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


@contextlib.contextmanager
def _sandbox(cwd: Path, tmp: Path, strict: bool | None, hook_timeout_s: float) -> Iterator[None]:
    """Run with ``cwd`` as working directory, ``tmp`` as the temporary directory, the hook watchdog's
    limit set to ``hook_timeout_s`` and, unless ``strict`` is None, ``RLPROF_STRICT`` set to it."""
    env = {"TMPDIR": str(tmp), "RLPROF_HOOK_TIMEOUT_S": repr(float(hook_timeout_s))}
    if strict is not None:
        env["RLPROF_STRICT"] = "1" if strict else "0"
    old_cwd, old_tempdir = os.getcwd(), tempfile.tempdir
    old_env = {key: os.environ.get(key) for key in env}
    os.chdir(cwd)
    tempfile.tempdir = str(tmp)
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        tempfile.tempdir = old_tempdir
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]):
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@contextlib.contextmanager
def _logged(into: list[logging.LogRecord]) -> Iterator[None]:
    logger = logging.getLogger("rlprof")
    handler = _Collect(into)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
