"""The controller-side pieces of :mod:`rlprof.ray` that need no running cluster: ``worker_options``
(runtime_env contributions, run id), the per-step decision, and that Ray stays an optional import."""

import subprocess
import sys

import pytest

from rlprof import ConfigError, hookimpl
from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilerArgs, ProfilingController, WorkerSpec, worker_options


class NsightLike:
    """A backend that must start with the worker process, like nsys: it sizes its runtime_env by the plan."""

    def __init__(self, key="nsight"):
        self.key = key
        self.seen = []

    @hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return {**tool_config, "validated": True}

    @hookimpl
    def worker_runtime_env(self, ctx):
        self.seen.append(ctx)
        return {self.key: {"capture-range-end": f"repeat-shutdown:{ctx.expected_captures}"}, "env_vars": {"FROM": ctx.backend}}


def config(*, discrete=False, ranks=None, tool="nsight"):
    role = {"enable": True, "discrete": discrete, **({"ranks": ranks} if ranks is not None else {"all_ranks": True})}
    return {"global_profiler": {"tool": tool, "steps": [1, 2]}, "actor_rollout_ref": {"actor": {"profiler": role}}}


HYBRID = dict(world_size=2, roles=("actor", "rollout", "ref"))


def test_runtime_env_is_sized_by_the_workers_plan():
    backend = NsightLike()
    opts = worker_options(config(discrete=True), 0, stages=HYBRID_ENGINE_STAGES, backends={"nsight": backend}, **HYBRID)
    # discrete: 2 steps x (rollout generate + ref log-prob + actor log-prob + actor update)
    assert opts["runtime_env"]["nsight"] == {"capture-range-end": "repeat-shutdown:8"}
    [ctx] = backend.seen
    assert (ctx.rank, ctx.world_size, ctx.roles, ctx.captures) == (0, 2, ("actor", "rollout", "ref"), True)
    assert ctx.tool_config == {"validated": True}
    # end-to-end: one capture per profiled step; without stages discrete cannot be counted
    assert worker_options(config(), 1, backends={"nsight": NsightLike()}, **HYBRID)["runtime_env"]["nsight"] == {
        "capture-range-end": "repeat-shutdown:2"}
    assert worker_options(config(discrete=True), 1, backends={"nsight": NsightLike()}, **HYBRID)["runtime_env"]["nsight"] == {
        "capture-range-end": "repeat-shutdown:None"}


def test_run_id_and_caller_runtime_env_are_merged():
    opts = worker_options(config(), 0, run_id="run-1", runtime_env={"env_vars": {"A": "1"}, "pip": ["x"]},
                          backends={"nsight": NsightLike()}, **HYBRID)
    assert opts["runtime_env"]["env_vars"] == {"A": "1", "RLPROF_RUN_ID": "run-1", "FROM": "nsight"}
    assert opts["runtime_env"]["pip"] == ["x"]


def test_unselected_worker_asks_no_backend():
    backend = NsightLike()
    assert worker_options(config(ranks=[1]), 0, backends={"nsight": backend}, **HYBRID) == {}
    assert backend.seen == []
    assert worker_options(config(ranks=[1]), 0, run_id="r", **HYBRID) == {"runtime_env": {"env_vars": {"RLPROF_RUN_ID": "r"}}}


def test_two_backends_setting_one_key_differently_is_an_error():
    cfg = config(tool="a,b")
    with pytest.raises(ConfigError, match=r"runtime_env.env_vars.FROM: backend 'b' sets 'b' but it is already 'a'"):
        worker_options(cfg, 0, backends={"a": NsightLike("nsight"), "b": NsightLike("other")}, **HYBRID)


def test_invalid_plan_fails_on_the_controller_before_any_worker_exists():
    with pytest.raises(ConfigError, match="outside a world of 2"):
        worker_options(config(ranks=[5]), 0, **HYBRID)


class Untouchable:
    """An actor handle that fails the test if the controller calls it."""

    def __getattr__(self, name):
        raise AssertionError(f"the controller called {name} on an unprofiled step")


def test_unprofiled_steps_make_no_remote_calls():
    controller = ProfilingController(config(tool="recorder"), [(WorkerSpec(rank=0, **HYBRID), Untouchable())])
    assert controller.profiles(1) and not controller.profiles(3)
    assert controller.start_step(3).results == {} and controller.step_boundary().results == {}
    off = ProfilingController({"global_profiler": {"tool": "recorder", "steps": None}}, [(WorkerSpec(rank=0, **HYBRID), Untouchable())])
    assert not off.profiles(1)
    off.start_step(1)
    off.step_boundary()


def test_one_run_id_for_every_worker(test_backends):
    controller = ProfilingController(config(tool="recorder"), run_id="shared")
    spec = WorkerSpec(rank=1, **HYBRID)
    assert controller.worker_options(spec)["runtime_env"]["env_vars"]["RLPROF_RUN_ID"] == "shared"
    assert ProfilingController(config(tool="recorder")).run_id != ProfilingController(config(tool="recorder")).run_id


def test_the_controller_honours_rlprof_run_id_as_its_workers_profilers_do(test_backends, monkeypatch, tmp_path):
    """A user who sets ``RLPROF_RUN_ID`` gets one run directory: the controller's is the workers'."""
    import rlprof

    monkeypatch.setenv("RLPROF_RUN_ID", "my run")
    controller = ProfilingController(config(tool="recorder"))
    worker = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",))
    assert controller.run_id == worker.run.run_id == "my_run"
    assert ProfilingController(config(tool="recorder"), run_id="given").run_id == "given"  # an explicit id wins


def test_the_placement_arguments_are_stated_once_and_are_the_profilers_own():
    """``ProfilerArgs`` is the one statement of where a Profiler stands: it must name exactly the
    Profiler's parameters besides config, run id, overrides and backends, or a worker would be
    built with one silently dropped."""
    import dataclasses
    import inspect

    import rlprof

    profiler = set(inspect.signature(rlprof.Profiler).parameters) - {"config", "run_id", "overrides", "backends"}
    assert {f.name for f in dataclasses.fields(ProfilerArgs)} == profiler
    spec = WorkerSpec(rank=1, roles=["actor"], world_size=2, group="critic")
    assert spec.profiler_kwargs() == {"rank": 1, "world_size": 2, "roles": ("actor",), "stages": None,
                                      "replica_rank": None, "num_replicas": None}
    with pytest.raises(TypeError, match="ranks"):  # a misspelled argument is refused, not dropped
        worker_options(config(), rank=0, ranks=1, **HYBRID)


def test_importing_rlprof_and_its_ray_glue_does_not_import_ray():
    code = "import sys, rlprof, rlprof.ray, rlprof.analysis.report; rlprof.Profiler; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_verl_driver_waits_for_the_run_id_it_exported(monkeypatch):
    """Outside Ray the only id a process of the run can have is ``RLPROF_RUN_ID``, spelled as its directory."""
    from rlprof.runtime.run_id import export_run_id, possible_run_ids

    monkeypatch.setenv("RLPROF_RUN_ID", "")  # empty counts as unset; monkeypatch then restores the variable's absence,
    exported = export_run_id()               # where delenv of an absent one recorded nothing and the id leaked on
    assert possible_run_ids() == [exported] and export_run_id() == exported  # set once, then kept
    monkeypatch.setenv("RLPROF_RUN_ID", "a run")
    assert possible_run_ids() == ["a_run"]
