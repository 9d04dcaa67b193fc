"""The typed facade over pluggy (rlprof.runtime.registry): its lifecycle methods follow the spec, each
builds the context class the spec names, and hookimpl options the core cannot honour are refused at load."""

from __future__ import annotations

import pytest

import rlprof
from rlprof import context, hookspecs
from rlprof.context import Capture, RunInfo
from rlprof.runtime.capture_state import OpenRegion
from rlprof.runtime.registry import CONTEXT_CLASSES, HOOKS, LIFECYCLE, Backends
from rlprof.testing.recorder import hook_function


class Spy:
    """Records the context of every lifecycle call, whatever hooks the spec has (built from it)."""

    def __init__(self):
        self.seen: dict[str, object] = {}
        for hook in LIFECYCLE:
            setattr(self, hook, hook_function(hook, lambda ctx, hook=hook: self.seen.__setitem__(hook, ctx)))


def test_the_hook_lists_come_from_the_spec():
    assert HOOKS == hookspecs.HOOKS
    annotations = {hook: getattr(hookspecs, hook).__annotations__ for hook in HOOKS}
    assert LIFECYCLE == tuple(hook for hook in HOOKS if "ctx" in annotations[hook]
                              and issubclass(getattr(context, annotations[hook]["ctx"]), context.HookContext))
    assert {hook: cls.__name__ for hook, cls in CONTEXT_CLASSES.items()} == {
        hook: annotations[hook]["ctx"] for hook in HOOKS if "ctx" in annotations[hook]}


def spied(tmp_path):
    spy = Spy()
    backends = Backends(["spy"], instances={"spy": spy})
    backends.run = RunInfo(run_id="r", rank=0, world_size=1, host="h", pid=1, run_dir=tmp_path, roles=("actor",))
    backends.primary = {"spy": {"k": 1}}
    return spy, backends


def test_every_lifecycle_hook_is_called_through_the_one_caller_with_the_context_the_spec_names(tmp_path):
    """``Backends.call`` is all a new hook needs: it builds the class the spec names, each field as given."""
    import dataclasses

    spy, backends = spied(tmp_path)
    base = {f.name for f in dataclasses.fields(context.HookContext)}
    for hook in LIFECYCLE:
        cls = CONTEXT_CLASSES[hook]
        fields = {f.name: object() for f in dataclasses.fields(cls) if f.name not in base}
        assert backends.call(hook, **fields) == {"spy": None}
        ctx = spy.seen[hook]
        assert type(ctx) is cls and type(ctx).__name__ == getattr(hookspecs, hook).__annotations__["ctx"]
        assert ctx.backend == "spy" and ctx.run is backends.run and ctx.tool_config == {"k": 1}
        assert all(getattr(ctx, name) is value for name, value in fields.items())


def test_the_machines_typed_methods_build_the_context_the_spec_names(tmp_path):
    """The methods the capture machine calls (its hot path) build the same classes as the one caller."""
    spy, backends = spied(tmp_path)
    capture = Capture(capture_id="step1", steps=(1,), regions=(), directory=tmp_path / "step1")
    region = OpenRegion("actor", "actor_update")
    region.configs = {"spy": {"k": 2}}
    calls = {
        "start_step": lambda: backends.start_step(1, capture, True),
        "start_role": lambda: backends.start_role(region, 1, capture, False, None),
        "iteration_boundary": lambda: backends.iteration_boundary(region, 1, capture, 0),
        "stop_role": lambda: backends.stop_role(region, 1, capture, False, None, None),
        "step_boundary": lambda: backends.step_boundary(1, capture, True, True),
        "finalize": lambda: backends.finalize("end", (1,), False),
    }
    for hook, call in calls.items():
        assert getattr(Backends, hook) and hook in LIFECYCLE
        call()
        ctx = spy.seen[hook]
        assert type(ctx) is CONTEXT_CLASSES[hook]
        assert ctx.backend == "spy" and ctx.run is backends.run
    assert spy.seen["start_role"].tool_config == {"k": 2} and spy.seen["start_role"].region == "actor_update"
    assert spy.seen["step_boundary"].ends_group == (1,)  # a close ends its own group (no grouping key)
    assert spy.seen["start_step"].ends_group == () and spy.seen["finalize"].ends_group == ()
    assert set(context.CONSTRUCTORS) <= {cls for cls in CONTEXT_CLASSES.values() if issubclass(cls, context.HookContext)}


@pytest.mark.parametrize("option", ["tryfirst", "trylast", "hookwrapper", "wrapper"])
def test_a_hookimpl_option_the_core_cannot_honour_is_refused_at_load(option, save_path):
    def stop_role(self, ctx):
        if option in ("hookwrapper", "wrapper"):
            yield
    ordered = type("Ordered", (), {"stop_role": rlprof.hookimpl(**{option: True})(stop_role)})()
    with pytest.raises(rlprof.BackendError) as info:
        rlprof.Profiler(None, run_id=f"refused-{option}", backends={"ordered": ordered}, overrides=[
            "global_profiler.tool=ordered", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    message = str(info.value)
    assert 'backend "ordered"' in message and "stop_role" in message and f"{option}=True" in message
    assert info.value.key == "global_profiler.tool"


def test_each_context_constructor_takes_its_class_fields_by_keyword_only():
    """A field added to a context class cannot silently take another field's value: every constructor
    takes the five base fields first (in HookContext's order) and the class's own fields by keyword,
    exactly those, and sets each to what it was given."""
    import dataclasses
    import inspect

    base = [f.name for f in dataclasses.fields(context.HookContext) if not f.name.startswith("_")]
    for cls, build in context.CONSTRUCTORS.items():
        params = inspect.signature(build).parameters.values()
        positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_ONLY]
        keywords = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
        own = {f.name for f in dataclasses.fields(cls)} - set(base) - {"_artifacts", "_notes"}
        assert positional == base and keywords == own, cls.__name__
        values = {name: object() for name in own}
        ctx = build(*(object() for _ in base), **values)
        assert type(ctx) is cls and all(getattr(ctx, name) is value for name, value in values.items())
        assert ctx.added_artifacts() == ()
