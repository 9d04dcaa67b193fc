"""rlprof-npu and its test stand-in against the real torch_npu API (the torch-npu wheel matching
the installed torch, read with ``ast``; nothing from it is imported or run).

* every ``torch_npu.…`` name the plugin's source uses exists, and every call passes arguments the
  real function accepts (names from the plugin's own AST: see npu_plugin_usage.py);
* every name the stand-in defines exists in the real package with the same signature (parameter
  names, kinds, and defaults where the real default is a literal), so behaviour tests that pass
  against the stand-in exercise an API that exists.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest
from npu_plugin_usage import plugin_uses
from npu_wheel_api import NON_LITERAL, Found, Param, WheelApi, accepts

import rlprof_npu

PLUGIN_DIR = Path(rlprof_npu.__file__).parent

EXPECTED_AT_LEAST = {
    "torch_npu.profiler.profile",
    "torch_npu.profiler.profile.().start",
    "torch_npu.profiler.profile.().stop",
    "torch_npu.profiler._ExperimentalConfig",
    "torch_npu.profiler.tensorboard_trace_handler",
    "torch_npu.profiler.ProfilerLevel.Level_none",
    "torch_npu.profiler.ProfilerLevel.Level0",
    "torch_npu.profiler.ProfilerLevel.Level1",
    "torch_npu.profiler.ProfilerLevel.Level2",
    "torch_npu.profiler.AiCMetrics.AiCoreNone",
    "torch_npu.profiler.AiCMetrics.PipeUtilization",
    "torch_npu.profiler.ExportType.Db",
    "torch_npu.profiler.ExportType.Text",
    "torch_npu.profiler.ProfilerActivity.CPU",
    "torch_npu.profiler.ProfilerActivity.NPU",
    "torch_npu.npu.mstx.range_start",
    "torch_npu.npu.mstx.range_end",
    "torch_npu.profiler.profiler.analyse",
}
"""What the plugin is known to use; guards the usage reader against silently finding nothing."""


@pytest.fixture(scope="module")
def real(torch_npu_wheel) -> WheelApi:
    return WheelApi(torch_npu_wheel)


def exists(real: WheelApi, dotted: str, module: str | None = None) -> Found | None:
    found = real.resolve(dotted, module)
    if found is not None and found.kind == "compiled" and not real.compiled_member_exists(found):
        return None
    return found


def test_the_usage_reader_sees_what_the_plugin_uses():
    chains = {use.chain for use in plugin_uses(PLUGIN_DIR)}
    assert EXPECTED_AT_LEAST <= chains, sorted(EXPECTED_AT_LEAST - chains)


def test_every_torch_npu_name_the_plugin_uses_exists_in_the_real_wheel(real):
    missing = [f"{u.file}:{u.line} {u.chain}" for u in plugin_uses(PLUGIN_DIR) if exists(real, u.chain) is None]
    assert not missing, "torch_npu has no such name: " + "; ".join(missing)


def test_every_torch_npu_call_of_the_plugin_passes_arguments_the_real_one_accepts(real):
    problems = []
    checked = set()
    for use in plugin_uses(PLUGIN_DIR):
        if not use.call:
            continue
        found = real.resolve(use.chain)
        assert found is not None and found.kind in ("class", "function"), f"{use.chain} is not callable in torch_npu"
        for problem in accepts(real.parameters(found), use.positional, list(use.keywords)):
            problems.append(f"{use.file}:{use.line} {use.chain}(): {problem}")
        checked.add(use.chain)
    assert not problems, "; ".join(problems)
    assert {"torch_npu.profiler.profile", "torch_npu.profiler._ExperimentalConfig",
            "torch_npu.profiler.tensorboard_trace_handler", "torch_npu.profiler.profiler.analyse"} <= checked


# ----------------------------------------------------------------------------------- the stand-in


def _standin_objects():
    """(real module, dotted name in it, stand-in object) for every name the stand-in mirrors,
    class members included."""
    import standin_torch_npu

    for standin_name, real_module in standin_torch_npu.MIRRORS.items():
        module = importlib.import_module(standin_name)
        for name in module.__all__:
            obj = getattr(module, name)
            yield real_module, name, obj
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    if member == "__init__" or not member.startswith("_"):
                        yield real_module, f"{name}.{member}", value


def _standin_params(obj, *, method: bool) -> list[Param]:
    if isinstance(obj, staticmethod):
        obj, method = obj.__func__, False
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = list(inspect.signature(target).parameters.values())
    if method or inspect.isclass(obj):
        params = params[1:]
    return [Param(p.name, p.kind.name.lower(), p.default is not inspect.Parameter.empty,
                  None if p.default is inspect.Parameter.empty else p.default) for p in params]


def test_every_name_the_standin_defines_exists_in_the_real_wheel(real):
    missing = [f"{module}:{name}" for module, name, _ in _standin_objects() if exists(real, name, module) is None]
    assert not missing, f"the stand-in defines names torch_npu lacks: {missing}"


def test_the_standin_signatures_are_the_real_ones(real):
    compared, problems = [], []
    for module, name, obj in _standin_objects():
        found = real.resolve(name, module)
        if found is None or found.kind not in ("class", "function"):
            continue
        if not (inspect.isclass(obj) or inspect.isfunction(obj) or isinstance(obj, staticmethod)):
            continue
        if inspect.isclass(obj) and "__init__" not in vars(obj):
            continue  # enums and constant holders: their members are checked by name
        ours = _standin_params(obj, method=found.method)
        theirs = real.parameters(found)
        name = f"{module}:{name}"
        compared.append(name)
        shape = lambda ps: [(p.name, p.kind, p.has_default) for p in ps]  # noqa: E731
        if shape(ours) != shape(theirs):
            problems.append(f"{name}: stand-in {shape(ours)} != real {shape(theirs)}")
            continue
        for mine, real_param in zip(ours, theirs):
            if real_param.has_default and real_param.default is not NON_LITERAL and mine.default != real_param.default:
                problems.append(f"{name}({mine.name}=...): stand-in default {mine.default!r} != real {real_param.default!r}")
    assert not problems, "\n".join(problems)
    assert {"torch_npu.profiler:profile", "torch_npu.profiler:_ExperimentalConfig", "torch_npu.profiler:tensorboard_trace_handler",
            "torch_npu.profiler.profiler:analyse", "torch_npu.npu:mstx.range_start", "torch_npu.npu:mstx.range_end"} <= set(compared)


def test_the_reader_rejects_what_torch_npu_lacks(real):
    """The checks above can fail: misspelled members, modules and keywords are caught."""
    assert exists(real, "torch_npu.profiler.ProfilerLevel.Level3") is None
    assert exists(real, "torch_npu.profiler.ProfilerActivity.GPU") is None
    assert exists(real, "torch_npu.npu.mstx.range_push_all") is None
    assert exists(real, "torch_npu.profilers") is None
    profile = real.resolve("torch_npu.profiler.profile")
    assert accepts(real.parameters(profile), 0, ["with_memory"])
    assert accepts(real.parameters(profile), 1, [])  # keyword-only arguments
    assert not accepts(real.parameters(profile), 0, ["with_modules", "experimental_config"])
