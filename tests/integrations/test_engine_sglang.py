"""The SGLang engine adapter, against the real sglang source and through a named stand-in engine.

SGLang has no CPU build, so it never runs here. Two kinds of test instead:

* **source checks** read the real wheels (sglang 0.5.23, the release the adapter targets, and 0.5.12,
  verl 0.9.1's pin), downloaded once into ``$RLPROF_TEST_CACHE`` and parsed with ``ast``: every method
  the adapter calls on an engine and every keyword it passes exists there under that name, and the
  trace names ``written()`` expects are the ones the scheduler builds. The same checks hold the
  stand-in to the real signatures.
* **behaviour tests** drive :class:`StandInSglangEngine` — a stand-in, not SGLang — through the core's
  ``load_engine("sglang")``: it mirrors ``Engine.start_profile(**kwargs)``/``stop_profile()``, the
  scheduler's forward counting and its naming, and writes a real torch.profiler Chrome trace.
"""

from __future__ import annotations

import ast
import asyncio
import gzip
import inspect
import json
import os
import time
import zipfile
from pathlib import Path

import pytest

from rlprof.integrations.engines import sglang as adapter_module
from rlprof.integrations.engines.contract import EngineCapture, EngineRequest, EngineSettings, load_engine
from rlprof.testing.downloads import cached_wheel

TARGET = "0.5.23"
VERL_PIN = "0.5.12"


# --- the stand-in ---------------------------------------------------------------------------------

PROFILE_REQ_FIELDS = ("req_type", "output_dir", "start_step", "num_steps", "activities", "profile_by_stage",
                      "with_stack", "record_shapes", "profile_id", "merge_profiles", "profile_prefix",
                      "profile_stages", "detailed_annotations", "rid", "http_worker_ipc")
"""sglang 0.5.23's ``ProfileReq`` fields (with ``BaseReq``'s); checked against the wheel below."""
ALREADY_IN_PROGRESS = "Profiling is already in progress"
"""How the scheduler refuses a second session; checked against the wheel below."""


class StandInSglangEngine:
    """A STAND-IN for ``sglang.Engine`` (0.5.23), for behaviour tests only: not SGLang.

    Same method names and signatures as the real ``Engine.start_profile(self, **kwargs)`` /
    ``stop_profile(self)`` (checked against the wheel). Keywords the real ``ProfileReq`` lacks raise
    ``TypeError`` as msgspec does; the scheduler's refusals come back as ``RuntimeError(message)`` as the
    tokenizer manager raises them (messages checked against the wheel). Mirrors the scheduler's
    ``SchedulerProfilerManager``: a forward count since the engine started, a session that starts at
    once, or with ``start_step`` at forward ``max(start_step, count + 1)``, and ends by itself after
    ``num_steps`` forwards; ``with_stack``/``record_shapes`` on unless ``False``; the trace written with
    torch's ``export_chrome_trace`` as ``[<prefix>-]<time>-TP-0.trace.json.gz``. ``generate`` runs one
    tiny torch op per forward inside a ``forward_<n>`` range, so tests can count captured forwards."""

    def __init__(self) -> None:
        self.forward_ct = 0
        self.req: dict = {}
        self.profiler = None  # the torch profiler while a session is in progress
        self.dead = False

    def start_profile(self, **kwargs):
        unknown = sorted(set(kwargs) - set(PROFILE_REQ_FIELDS))
        if unknown:
            raise TypeError(f"Unexpected keyword argument {unknown[0]!r}")
        self._check_alive()
        if self.profiler is not None:
            raise RuntimeError(ALREADY_IN_PROGRESS + ". Call /stop_profile first.")
        req = dict(kwargs, profile_id=kwargs.get("profile_id") or str(time.time()))
        req["with_stack"] = req.get("with_stack") is not False
        req["record_shapes"] = req.get("record_shapes") is not False
        start, steps = req.get("start_step"), req.get("num_steps")
        req["first"] = max(start, self.forward_ct + 1) if start else None
        req["target"] = None
        if steps:
            req["target"] = req["first"] + steps if start else self.forward_ct + steps + 1
        self.req = req
        if not start:
            self._open()

    def stop_profile(self):
        self._check_alive()
        if self.profiler is None:
            raise RuntimeError(adapter_module.NOT_IN_PROGRESS + ". Call /start_profile first.")
        self._write()

    def generate(self, forwards: int) -> None:
        import torch

        x = torch.ones(8, 8)
        for _ in range(forwards):
            self._check_alive()
            self.forward_ct += 1
            if self.req.get("target") and self.req["target"] <= self.forward_ct and self.profiler is not None:
                self._write()
            if self.req.get("first") == self.forward_ct:
                self._open()
            with torch.profiler.record_function(f"forward_{self.forward_ct}"):
                x = torch.relu(x @ x)

    def _open(self) -> None:
        import torch

        self.profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                               with_stack=self.req["with_stack"],
                                               record_shapes=self.req["record_shapes"])
        self.profiler.start()

    def _write(self) -> None:
        req = self.req
        self.profiler.stop()
        out = Path(req.get("output_dir") or "/tmp")
        out.mkdir(parents=True, exist_ok=True)
        prefix = f"{req['profile_prefix']}-" if req.get("profile_prefix") else ""
        self.profiler.export_chrome_trace(str(out / f"{prefix}{req['profile_id']}-TP-0.trace.json.gz"))
        self.profiler = None
        req["first"] = None

    def _check_alive(self) -> None:
        if self.dead:
            raise ConnectionResetError("scheduler connection lost (stand-in)")


class StandInTokenizerManager:
    """A STAND-IN for sglang 0.5.12's ``TokenizerManager`` profiling methods (what verl 0.9.1's server
    awaits): ``async start_profile(self, output_dir=None, start_step=None, …)`` with 0.5.12's keyword
    names (checked against that wheel), ``async stop_profile(self)``; it records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.stop_delay = 0.0

    async def start_profile(self, output_dir=None, start_step=None, num_steps=None, activities=None,
                            with_stack=None, record_shapes=None, profile_by_stage=False, merge_profiles=False,
                            profile_prefix=None, profile_stages=None):
        self.calls.append(("start", {k: v for k, v in locals().items() if k != "self"}))

    async def stop_profile(self):
        await asyncio.sleep(self.stop_delay)
        self.calls.append(("stop", {}))


# --- the real source --------------------------------------------------------------------------------

def _wheel_modules(version: str) -> dict[str, ast.Module]:
    wheel = cached_wheel(f"sglang=={version}", f"sglang-{version}-")
    parsed: dict[str, ast.Module] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("sglang/srt/") and name.endswith(".py") and (
                    "managers/" in name or name.endswith("entrypoints/engine.py")):
                parsed[name] = ast.parse(zf.read(name))
    return parsed


@pytest.fixture(scope="module")
def target_source() -> dict[str, ast.Module]:
    return _wheel_modules(TARGET)


@pytest.fixture(scope="module")
def verl_pin_source() -> dict[str, ast.Module]:
    return _wheel_modules(VERL_PIN)


def _class(modules: dict[str, ast.Module], name: str) -> ast.ClassDef:
    for tree in modules.values():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
    raise AssertionError(f"class {name} not found in the wheel")


def _method(modules: dict[str, ast.Module], cls: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """``cls.name`` as defined in the wheel: in the class or, for TokenizerManager, in its mixins."""
    for tree in modules.values():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and (node.name == cls or (cls == "TokenizerManager" and node.name.startswith("Tokenizer") and node.name.endswith("Mixin"))):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                        return item
    raise AssertionError(f"{cls}.{name} not found in the wheel")


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], bool]:
    names = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
    return names, fn.args.kwarg is not None


def _struct_fields(modules: dict[str, ast.Module], name: str) -> list[str]:
    cls = _class(modules, name)
    fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id != "object":
            try:
                fields += _struct_fields(modules, base.id)
            except AssertionError:
                pass
    return fields


def engine_calls() -> set[str]:
    """Every attribute the adapter reads on an ``engine`` argument (its source, parsed)."""
    tree = ast.parse(Path(adapter_module.__file__).read_text())
    return {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "engine"}


def unknown_keywords(engine_class: type, fields: list[str]) -> list[str]:
    """Keywords ``engine_class`` (an adapter class) would pass to ``start_profile`` that ``fields`` lacks."""
    capture = _capture("/tmp/x", contents=("cpu", "cuda", "shapes", "stack"), window=(2, 4))
    return sorted(set(engine_class.profile_arguments(capture)) - set(fields))


def test_adapter_calls_only_methods_the_real_engine_has(target_source, verl_pin_source):
    calls = engine_calls()
    assert calls == {"start_profile", "stop_profile"}
    for source in (target_source, verl_pin_source):
        for cls in ("Engine", "TokenizerManager"):
            for name in calls:
                _method(source, cls, name)  # raises when absent
        names, has_kwargs = _parameters(_method(source, "Engine", "start_profile"))
        assert names == ["self"] and has_kwargs
        assert _parameters(_method(source, "Engine", "stop_profile")) == (["self"], False)
        assert _parameters(_method(source, "TokenizerManager", "stop_profile")) == (["self"], False)


def test_adapter_keywords_exist_in_both_releases(target_source, verl_pin_source):
    # 0.5.23: Engine.start_profile(**kw) -> ProfileReq(req_type=..., **kw); TokenizerManager takes a ProfileReq
    fields = _struct_fields(target_source, "ProfileReq")
    assert unknown_keywords(adapter_module.SglangEngine, fields) == []
    tm_names, _ = _parameters(_method(target_source, "TokenizerManager", "start_profile"))
    assert tm_names == ["self", "req"]  # the adapter's branch: a request object, built from the same keywords
    assert "req_type" in fields
    assert "START_PROFILE" in {t.id for n in _class(target_source, "ProfileReqType").body
                               if isinstance(n, ast.Assign) for t in n.targets}
    # 0.5.12 (verl 0.9.1's pin): Engine forwards **kw to TokenizerManager.start_profile's own keywords
    pin_names, pin_kwargs = _parameters(_method(verl_pin_source, "TokenizerManager", "start_profile"))
    assert not pin_kwargs
    assert unknown_keywords(adapter_module.SglangEngine, pin_names) == []


def test_the_check_catches_a_wrong_keyword(target_source, verl_pin_source):
    class Misspelled(adapter_module.SglangEngine):
        @classmethod
        def profile_arguments(cls, capture):
            kwargs = super().profile_arguments(capture)
            kwargs["output_path"] = kwargs.pop("output_dir")
            return kwargs

    class WithProfileId(adapter_module.SglangEngine):
        @classmethod
        def profile_arguments(cls, capture):
            return dict(super().profile_arguments(capture), profile_id=capture.prefix)

    assert unknown_keywords(Misspelled, _struct_fields(target_source, "ProfileReq")) == ["output_path"]
    # profile_id is a 0.5.23 field, but 0.5.12's tokenizer manager (verl's pin) has no such keyword
    assert unknown_keywords(WithProfileId, _struct_fields(target_source, "ProfileReq")) == []
    pin_names, _ = _parameters(_method(verl_pin_source, "TokenizerManager", "start_profile"))
    assert unknown_keywords(WithProfileId, pin_names) == ["profile_id"]


def test_standin_has_the_real_signatures(target_source, verl_pin_source):
    assert set(_struct_fields(target_source, "ProfileReq")) == set(PROFILE_REQ_FIELDS)
    for name in ("start_profile", "stop_profile"):
        real = _parameters(_method(target_source, "Engine", name))
        standin = inspect.signature(getattr(StandInSglangEngine, name)).parameters
        assert ([p for p, v in standin.items() if v.kind != v.VAR_KEYWORD],
                any(v.kind == v.VAR_KEYWORD for v in standin.values())) == real
        real_tm = _method(verl_pin_source, "TokenizerManager", name)
        assert isinstance(real_tm, ast.AsyncFunctionDef)
        assert list(inspect.signature(getattr(StandInTokenizerManager, name)).parameters) == _parameters(real_tm)[0]


def _trace_name_parts(modules: dict[str, ast.Module]) -> tuple[list[str], list[str]]:
    """From the scheduler method that names torch traces (``_stop_profile`` in 0.5.23, ``stop_profile``
    in 0.5.12: the one that assigns ``filename_parts``): the literal heads of the rank parts in the order
    the source appends them, and the string constants it uses (separators, suffix)."""
    for tree in modules.values():
        for fn in ast.walk(tree):
            if not (isinstance(fn, ast.FunctionDef) and "stop_profile" in fn.name and any(
                    isinstance(n, ast.Name) and n.id == "filename_parts" and isinstance(n.ctx, ast.Store)
                    for n in ast.walk(fn))):
                continue
            heads, constants = [], []
            for node in ast.walk(fn):
                if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                    head = node.values[0].value
                    if head.rstrip("-") in ("TP", *adapter_module.PARALLEL_PARTS):
                        heads.append((node.lineno, node.col_offset, head.rstrip("-")))
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    constants.append(node.value)
            return [h for _, _, h in sorted(heads)], constants
    raise AssertionError("no scheduler method assigning filename_parts (the trace name) in the wheel")


@pytest.mark.parametrize("which", ["target", "verl_pin"])
def test_written_pattern_matches_how_the_scheduler_names_traces(which, request):
    modules = request.getfixturevalue(f"{which}_source")
    order, constants = _trace_name_parts(modules)
    assert order[0] == "TP" and order[1:4] == list(adapter_module.PARALLEL_PARTS)
    assert adapter_module.TRACE_SUFFIX in constants and "-" in constants
    fields = _struct_fields(modules, "ProfileReq")
    assert "profile_prefix" in fields and "profile_id" in fields
    # the name as the source builds it: prefix + "-" + "-".join([profile_id, TP-n, DP-n...]) + suffix
    pattern = adapter_module.trace_name_pattern("step3_replica1")
    profile_id = str(1732345678.123456)
    for parts in (["TP-0"], ["TP-3", "DP-1"], ["TP-1", "DP-0", "PP-1", "EP-2"]):
        name = "step3_replica1-" + "-".join([profile_id, *parts]) + adapter_module.TRACE_SUFFIX
        match = pattern.match(name)
        assert match and match["profile_id"] == profile_id and match["tp"] == parts[0][3:]
    assert not pattern.match("step3_replica10-" + profile_id + "-TP-0" + adapter_module.TRACE_SUFFIX)
    assert not pattern.match(profile_id + "-TP-0" + adapter_module.TRACE_SUFFIX)  # another session's, unprefixed


@pytest.mark.parametrize("which", ["target", "verl_pin"])
def test_scheduler_refusals_reach_the_caller_as_the_adapter_expects(which, request):
    modules = request.getfixturevalue(f"{which}_source")
    strings = {n.value for tree in modules.values() for n in ast.walk(tree)
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert any(s.startswith(adapter_module.NOT_IN_PROGRESS) for s in strings)
    assert any(s.startswith(ALREADY_IN_PROGRESS) for s in strings)
    execute = _method(modules, "TokenizerManager", "_execute_profile")
    raised = [n.exc for n in ast.walk(execute) if isinstance(n, ast.Raise)]
    assert [r.func.id for r in raised if isinstance(r, ast.Call)] == ["RuntimeError"]


def test_verl_091_keywords_fit_its_pin_but_not_0523(target_source, verl_pin_source):
    """A fact the notes report: verl 0.9.1 awaits ``tokenizer_manager.start_profile(**kwargs)`` with the
    keys of ``build_sglang_profiler_args``; 0.5.12 takes them, 0.5.23 takes a ``ProfileReq`` only."""
    import importlib.util

    spec = importlib.util.find_spec("verl")
    if spec is None:
        pytest.skip("verl is not installed")
    tree = ast.parse((Path(spec.origin).parent / "utils" / "profiler" / "config.py").read_text())
    [fn] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "build_sglang_profiler_args"]
    [keys] = [[k.value for k in r.value.keys] for r in ast.walk(fn)
              if isinstance(r, ast.Return) and isinstance(r.value, ast.Dict) and r.value.keys]
    assert set(keys) == {"output_dir", "with_stack", "record_shapes", "start_step", "num_steps"}
    pin_names, pin_kwargs = _parameters(_method(verl_pin_source, "TokenizerManager", "start_profile"))
    assert set(keys) <= set(pin_names)
    names, has_kwargs = _parameters(_method(target_source, "TokenizerManager", "start_profile"))
    assert not has_kwargs and not set(keys) & set(names)


# --- behaviour, through the core -------------------------------------------------------------------

def _request(directory, tool="torch", contents=("cpu",), window=None, tool_config=None) -> EngineRequest:
    return EngineRequest(tool=tool, contents=tuple(contents), tool_config=tool_config or {"contents": list(contents)},
                         directory=str(directory), window=window)


def _capture(directory, prefix="step1_replica0", window=None, **kw) -> EngineCapture:
    request = _request(directory, window=window, **kw)
    return EngineCapture(prefix=prefix, directory=str(directory), request=request, window=window)


def _forwards(path: Path) -> list[str]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sorted({e["name"] for e in events if e.get("name", "").startswith("forward_")},
                  key=lambda n: int(n.split("_")[1]))


def _traced_forwards(sglang, engine, capture: EngineCapture, tokens: int) -> list[str]:
    """Start the capture, generate ``tokens``, stop it: the forward passes in the one trace it wrote."""
    sglang.start(engine, capture)
    engine.generate(tokens)
    sglang.stop(engine, capture)
    [trace] = sglang.written(capture)
    return _forwards(trace)


@pytest.fixture
def sglang():
    adapter = load_engine("sglang")
    assert adapter.name == "sglang" and adapter.rlprof_contract == 1
    return adapter


def test_settings_warn_for_what_sglang_cannot_honour(sglang, tmp_path):
    plain = sglang.settings(_request(tmp_path, contents=("cpu", "shapes")))
    assert plain == EngineSettings()
    key = "actor_rollout_ref.rollout.profiler.tool_config"
    warned = sglang.settings(_request(tmp_path, contents=("cpu", "memory"), window=(2, 4)))
    assert warned.engine_kwargs == {}
    assert [k for k, _ in warned.warnings] == [f"{key}.torch.contents", f"{key}.torch.profile_token_start"]
    assert "memory" in warned.warnings[0][1]
    npu = sglang.settings(_request(tmp_path, tool="npu", contents=("npu", "cpu"),
                                   tool_config={"level": "level0", "contents": ["npu", "cpu"], "analysis": False}))
    assert [k for k, _ in npu.warnings] == [f"{key}.npu.level", f"{key}.npu.analysis"]
    assert sglang.settings(_request(tmp_path, tool="npu", contents=("npu",),
                                    tool_config={"level": "level1", "analysis": True})).warnings == ()


def test_contents_become_sglang_arguments(sglang, tmp_path):
    args = sglang.profile_arguments(_capture(tmp_path, contents=()))
    assert args == {"output_dir": str(tmp_path / "step1_replica0"), "activities": ["CPU", "GPU"],
                    "with_stack": False, "record_shapes": False, "profile_prefix": "step1_replica0"}
    args = sglang.profile_arguments(_capture(tmp_path, contents=("cpu", "module", "shapes"), window=(0, 3)))
    assert (args["activities"], args["with_stack"], args["record_shapes"]) == (["CPU"], True, True)
    assert (args["start_step"], args["num_steps"]) == (1, 3)
    npu = sglang.profile_arguments(_capture(tmp_path, tool="npu", contents=("npu", "stack")))
    assert npu["activities"] == ["CPU", "GPU"] and npu["with_stack"]


def test_a_capture_through_the_core_writes_a_real_trace(sglang, tmp_path):
    engine = StandInSglangEngine()
    engine.generate(3)  # warm-up forwards before the first capture
    capture = _capture(tmp_path, contents=("cpu", "shapes"))
    assert sglang.start(engine, capture) is None
    engine.generate(5)
    assert sglang.stop(engine, capture) is None
    files = sglang.written(capture)
    assert [f.parent for f in files] == [tmp_path / "step1_replica0"]
    assert files[0].name.startswith("step1_replica0-") and files[0].name.endswith("-TP-0.trace.json.gz")
    assert _forwards(files[0]) == [f"forward_{n}" for n in range(4, 9)]
    # a second capture on the same replica: its own folder; the first one's files stay and are not listed
    second = _capture(tmp_path, prefix="step2_replica0", contents=("cpu",))
    sglang.start(engine, second)
    engine.generate(2)
    sglang.stop(engine, second)
    assert [f.parent.name for f in sglang.written(second)] == ["step2_replica0"]
    assert sglang.written(capture) == files


def test_token_window_on_a_fresh_engine_and_after(sglang, tmp_path):
    engine = StandInSglangEngine()
    first = _capture(tmp_path, prefix="step1_replica0", window=(2, 4))
    assert _traced_forwards(sglang, engine, first, 16) == ["forward_2", "forward_3", "forward_4", "forward_5"]  # steps [2, 6), as vLLM
    # later captures: start_step counts from the engine's start, so the window starts at once (the warning)
    later = _capture(tmp_path, prefix="step2_replica0", window=(2, 4))
    assert _traced_forwards(sglang, engine, later, 16) == ["forward_17", "forward_18", "forward_19", "forward_20"]


def test_lost_tells_a_dead_engine_from_a_failed_call(sglang, tmp_path):
    engine = StandInSglangEngine()
    capture = _capture(tmp_path)
    sglang.start(engine, capture)
    with pytest.raises(RuntimeError) as twice:
        sglang.start(engine, capture)
    assert not sglang.lost(twice.value)  # the scheduler's answer: the engine is alive
    engine.dead = True
    with pytest.raises(ConnectionResetError) as gone:
        sglang.stop(engine, capture)
    assert sglang.lost(gone.value)
    assert sglang.written(capture) == []  # nothing was written, nothing is made up
    engine.profiler.stop()  # the stand-in's "dead" engine leaves its torch profiler running: end it here
    assert sglang.lost(RuntimeError("Event loop is closed"))
    assert sglang.lost(asyncio.TimeoutError())
    assert not sglang.lost(TypeError("Unexpected keyword argument 'x'"))
    zmq_error = type("ContextTerminated", (Exception,), {"__module__": "zmq.error"})
    assert sglang.lost(zmq_error())


def test_the_async_tokenizer_manager_gets_awaitables(sglang, tmp_path, monkeypatch):
    manager = StandInTokenizerManager()
    capture = _capture(tmp_path, contents=("cpu", "stack"), window=(3, 2))
    started = sglang.start(manager, capture)
    assert inspect.isawaitable(started) and manager.calls == []
    asyncio.run(started)
    assert manager.calls == [("start", {"output_dir": str(tmp_path / "step1_replica0"), "start_step": 3,
                                        "num_steps": 2, "activities": ["CPU"], "with_stack": True,
                                        "record_shapes": False, "profile_by_stage": False, "merge_profiles": False,
                                        "profile_prefix": "step1_replica0", "profile_stages": None})]
    asyncio.run(sglang.stop(manager, capture))
    assert manager.calls[-1] == ("stop", {})
    # a stop that never returns (SGLang's communicator waits forever on a dead scheduler) becomes "lost"
    monkeypatch.setattr(adapter_module, "STOP_TIMEOUT_S", 0.05)
    manager.stop_delay = 5.0
    with pytest.raises(asyncio.TimeoutError) as hung:
        asyncio.run(sglang.stop(manager, capture))
    assert sglang.lost(hung.value)
    # with a window that closed by itself, the awaited stop's "not in progress" means done
    async def refused():
        raise RuntimeError(adapter_module.NOT_IN_PROGRESS + ". Call /start_profile first.")

    manager.stop_profile = refused
    asyncio.run(sglang.stop(manager, capture))
    with pytest.raises(RuntimeError):
        asyncio.run(sglang.stop(manager, _capture(tmp_path)))


def test_a_window_longer_than_the_generate_call_is_written_at_stop(sglang, tmp_path):
    engine = StandInSglangEngine()
    capture = _capture(tmp_path, window=(2, 100))
    sglang.start(engine, capture)
    engine.generate(5)
    assert sglang.written(capture) == []  # still open
    sglang.stop(engine, capture)
    [trace] = sglang.written(capture)
    assert _forwards(trace) == ["forward_2", "forward_3", "forward_4", "forward_5"]


def test_without_a_window_not_in_progress_is_an_error(sglang, tmp_path):
    engine = StandInSglangEngine()
    capture = _capture(tmp_path)
    with pytest.raises(RuntimeError, match=adapter_module.NOT_IN_PROGRESS) as failed:
        sglang.stop(engine, capture)
    assert not sglang.lost(failed.value)
    windowed = _capture(tmp_path, window=(1, 2))
    assert sglang.stop(engine, windowed) is None  # a window closes by itself: the same answer means done


def test_importing_the_adapter_stays_light():
    import subprocess
    import sys

    code = ("import sys, rlprof.integrations.engines.sglang as m\n"
            "from rlprof.integrations.engines.contract import EngineRequest\n"
            "m.SglangEngine().settings(EngineRequest('torch', ('cpu', 'memory'), {}, '/tmp', (2, 4)))\n"
            "print(sorted(k for k in ('torch', 'sglang', 'ray', 'vllm') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert out.stdout.strip() == "[]"
