"""The torch_memory backend: configuration checked against torch's real API, the CPU-only path, the window /
group / OOM logic against a named recorder stand-in, and (with CUDA) real snapshots."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch

import rlprof
from pathlib import Path
from rlprof.manifest import read_records
from rlprof_torch import memory_options
from rlprof_torch.memory import NO_CUDA, TorchMemoryBackend
from rlprof_torch.memory_options import record_arguments, validate
from rlprof_torch.oom import ATTACH, OomWatch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
without_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def memory_config(make_config, section: dict | None = None, tool="torch_memory") -> dict:
    config = make_config(tool=tool)
    config["actor_rollout_ref"]["actor"]["profiler"]["tool_config"] = {"torch_memory": dict(section or {})}
    return config


@without_cuda
def test_without_cuda_it_warns_once_writes_nothing_and_training_goes_on(make_config, run_training, caplog):
    with caplog.at_level(logging.WARNING):
        run = run_training(memory_config(make_config))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no CUDA device" in warnings[0].getMessage()
    assert run.artifacts == [] and not run.profiler.errors
    assert not list(run.run_dir.rglob("*.pickle"))


@without_cuda
def test_without_cuda_the_environment_check_says_why():
    assert TorchMemoryBackend().check_environment() == [NO_CUDA]


@without_cuda
def test_with_torch_beside_it_the_traces_still_come(make_config, run_training):
    run = run_training(memory_config(make_config, tool=["torch", "torch_memory"]))
    assert [r["backend"] for r in run.artifacts] == ["torch", "torch"]


def test_verl_and_torchtitan_keys_are_understood_and_defaults_filled(make_config):
    section = {"trace_alloc_max_entries": 1000, "stack_depth": 32, "stacks": "python", "kw_args": {},
               "memory_snapshot_num_steps": 2, "dump_on_oom": False, "clear_history": False, "name": "torch_memory"}
    prof = rlprof.Profiler(memory_config(make_config, section), roles=("actor",))
    assert prof.tool_configs["actor"]["torch_memory"] == {
        "trace_alloc_max_entries": 1000, "stack_depth": 32, "context": "all", "stacks": "python", "clear_history": False,
        "memory_snapshot_num_steps": 2, "dump_on_oom": False, "kw_args": {}}
    prof.finalize()
    defaults = validate({}, "t")
    assert (defaults["dump_on_oom"], defaults["clear_history"], defaults["memory_snapshot_num_steps"]) == (True, True, 1)
    assert defaults["trace_alloc_max_entries"] == 100_000  # bounded: torch's own default keeps every event forever
    assert validate({"max_entries": 500}, "t")["trace_alloc_max_entries"] == 500  # torch's / torchtitan's name
    assert validate({"kw_args": {"skip_actions": ["free_requested"], "compile_context": True}}, "t")["kw_args"] == {
        "skip_actions": ["free_requested"], "compile_context": True}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"trace_alloc_max_entries": 0}, "trace_alloc_max_entries: got 0 (int); allowed: a positive integer"),
        ({"max_entries": -5}, "max_entries: got -5 (int); allowed: a positive integer"),
        ({"max_entries": 10, "trace_alloc_max_entries": 20}, "max_entries: got 10 but trace_alloc_max_entries is 20"),
        ({"stack_depth": "32"}, "stack_depth: got '32' (str); allowed: a positive integer"),
        ({"stack_depth": True}, "stack_depth: got True (bool)"),
        ({"context": "everything"}, "context: got 'everything' (str); allowed: null, state, alloc, all"),
        ({"stack": "all"}, "stack: unknown key (did you mean 'stacks'?)"),
        ({"clear_history": "yes"}, "clear_history: got 'yes' (str); allowed: true or false"),
        ({"dump_on_oom": 1}, "dump_on_oom: got 1 (int); allowed: true or false"),
        ({"memory_snapshot_num_steps": 0}, "memory_snapshot_num_steps: got 0 (int); allowed: a positive integer"),
        ({"kw_args": {"max_entries": 5}}, "kw_args.max_entries: max_entries is not passed through (set "
                                          "actor_rollout_ref.actor.profiler.tool_config.torch_memory.trace_alloc_max_entries instead)"),
        ({"kw_args": {"enabled": "all"}}, "kw_args.enabled: enabled is not passed through (rlprof sets it)"),
        ({"kw_args": {"skip_actions": ["allocs"]}}, "kw_args.skip_actions: got ['allocs'] (list); allowed: a list of alloc,"),
        ({"kw_args": {"record_context": True}}, "kw_args.record_context: got True (bool); allowed: one of the keys"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(make_config, section, message):
    with pytest.raises(rlprof.ConfigError) as caught:
        rlprof.Profiler(memory_config(make_config, section), roles=("actor",))
    assert f"actor_rollout_ref.actor.profiler.tool_config.torch_memory.{message}" in str(caught.value)


def test_a_stack_depth_torch_cannot_honour_is_said_once(make_config, caplog):
    config = memory_config(make_config, {"stack_depth": 8})
    for name in ("rollout", "ref"):  # three role sections, one warning
        config["actor_rollout_ref"][name] = {"profiler": config["actor_rollout_ref"]["actor"]["profiler"]}
    with caplog.at_level(logging.WARNING, logger="rlprof.torch_memory"):
        rlprof.Profiler(config, roles=("actor", "rollout", "ref")).finalize()
    said = [r.getMessage() for r in caplog.records if "stack_depth" in r.getMessage()]
    assert len(said) == 1 and "stack_depth=8 has no effect" in said[0] and "stacks: python" in said[0]


# ---------------------------------------------------------------------- the real torch API


def test_every_argument_rlprof_passes_is_in_torch_record_memory_history_signature():
    """rlprof calls ``_record_memory_history(**record_arguments(...))``: every name must be a parameter
    of the installed torch's function, with the choices its docstring lists."""
    import inspect

    recorder = torch.cuda.memory._record_memory_history
    parameters = inspect.signature(recorder).parameters
    arguments = record_arguments(validate({"kw_args": {name: value for name, value in (
        ("compile_context", False), ("global_record_annotations", False), ("skip_actions", []))}}, "t"), clear_history=True)
    assert set(arguments) <= set(parameters), set(arguments) - set(parameters)
    assert set(memory_options.PASSTHROUGH) <= set(parameters)
    assert set(memory_options.OWNED) <= set(parameters)  # what kw_args may not set is real too
    doc = inspect.getdoc(recorder)
    for choice in [c for c in memory_options.CONTEXTS if c] + list(memory_options.STACKS) + list(memory_options.SKIP_ACTIONS):
        assert f'"{choice}"' in doc, choice
    for name in ("_snapshot", "_set_memory_metadata"):
        assert callable(getattr(torch.cuda.memory, name))


def test_the_oom_observer_rlprof_attaches_is_part_of_this_torch():
    """``torch._C._cuda_attach_out_of_memory_observer`` exists only in CUDA builds; torch's own list of
    C functions (used by torch.compile) names it in every build, which pins the name to this version."""
    import torch._dynamo.trace_rules as rules

    assert f"torch._C.{ATTACH}" in Path(rules.__file__).read_text()
    if torch.cuda.is_available():
        assert callable(getattr(torch._C, ATTACH))


# ---------------------------------------------------------------------- windows, groups and OOM (recorder stand-in)


class RecorderStandIn:
    """STAND-IN for the CUDA caching allocator's recorder (this machine has no CUDA device): records
    the calls rlprof makes to the real functions' names and returns a snapshot shaped like torch's.
    The same paths run for real in the ``cuda``-marked tests below."""

    def __init__(self, monkeypatch):
        self.calls: list[dict] = []
        self.observers: list = []
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kw: self.calls.append(kw))
        monkeypatch.setattr(torch.cuda.memory, "_snapshot", lambda: {"segments": [], "device_traces": [[{"action": "alloc"}]]})
        monkeypatch.setattr(torch.cuda.memory, "_set_memory_metadata", lambda region: None)
        monkeypatch.setattr(torch._C, ATTACH, self.observers.append, raising=False)
        monkeypatch.setattr(OomWatch, "_instance", None)

    def clears(self) -> list:
        return [c.get("clear_history") for c in self.calls if c.get("enabled") == "all"]


def test_each_window_gets_its_own_history_by_default(make_config, run_training, monkeypatch):
    recorder = RecorderStandIn(monkeypatch)
    run = run_training(memory_config(make_config))
    assert [(a["steps"], a["capture"]) for a in run.artifacts] == [([1], "step1"), ([2], "step2")]
    assert recorder.clears() == [False, True]  # starts, then clears as the second window opens
    assert recorder.calls[-1] == {"enabled": None}  # recording stopped at finalize
    assert all(c.get("max_entries") == 100_000 for c in recorder.calls[:-1])


def test_clear_history_false_keeps_one_running_history(make_config, run_training, monkeypatch):
    recorder = RecorderStandIn(monkeypatch)
    run = run_training(memory_config(make_config, {"clear_history": False, "stacks": "python", "context": "alloc"}))
    assert len(run.artifacts) == 2 and recorder.clears() == [False]
    assert (recorder.calls[0]["stacks"], recorder.calls[0]["context"]) == ("python", "alloc")


def test_memory_snapshot_num_steps_writes_one_snapshot_per_group_of_steps(make_config, run_training, monkeypatch):
    recorder = RecorderStandIn(monkeypatch)
    config = memory_config(make_config, {"memory_snapshot_num_steps": 2})
    config["global_profiler"]["steps"] = [1, 2, 3]
    run = run_training(config, steps=(1, 2, 3, 4))
    # steps 1-2 in one snapshot (history kept across both windows); step 3 left over, written at finalize
    assert [(a["steps"], a["capture"]) for a in run.artifacts] == [([1, 2], None), ([3], None)]
    assert recorder.clears() == [False, True]  # cleared only as the group after 1-2 began
    paths = run.files("torch_memory")
    assert [p.parent.parent.parent.name for p in paths] == ["step2", "step3"] and all(p.is_file() for p in paths)
    from rlprof.analysis.report import build_reports

    [report] = build_reports([run.run_dir])
    assert not report.missing and not report.short_captures  # a grouped snapshot covers its steps


def test_dump_on_oom_writes_a_snapshot_when_the_allocator_fails(make_config, run_training, monkeypatch, caplog):
    recorder = RecorderStandIn(monkeypatch)
    prof = rlprof.Profiler(memory_config(make_config), roles=("actor", "ref"))
    prof.start_step(1)
    [observer] = recorder.observers  # attached once, as the first window opened
    with caplog.at_level(logging.ERROR, logger="rlprof.torch_memory"):
        observer(0, 2 << 30, 80 << 30, 1 << 20)  # what the allocator calls before raising OutOfMemoryError
    prof.step_boundary()
    artifacts = prof.finalize()
    [oom] = [a for a in artifacts if a.get("trigger") == "oom"]
    assert oom["path"].startswith("_process/") and oom["path"].endswith("oom.memory_snapshot.pickle")
    assert (prof.run.run_dir / oom["path"]).is_file()
    assert any("CUDA out of memory on device 0" in r.getMessage() and oom["path"].split("/")[-1] in r.getMessage()
               for r in caplog.records)
    assert len([a for a in artifacts if a.get("trigger") != "oom"]) == 1  # the window's own snapshot too


def test_two_profilers_of_one_run_and_rank_in_one_process_keep_both_snapshots(make_config, run_training, monkeypatch):
    """A worker set up twice (issue 40): the second Profiler's windows have the first one's directories; each
    snapshot is kept, under its own name, listed once, and the OOM snapshots of both too."""
    import pickle

    recorder = RecorderStandIn(monkeypatch)
    config = memory_config(make_config)
    config["global_profiler"]["steps"] = [1]
    runs = []
    for n in range(2):
        prof = rlprof.Profiler(config, roles=("actor", "ref"), run_id="twice")
        prof.start_step(1)
        recorder.observers[-1](0, 2 << 30, 80 << 30, 1 << 20)  # an OOM in each
        prof.step_boundary()
        runs.append(prof.finalize())
    run_dir = prof.run.run_dir
    paths = [a["path"] for artifacts in runs for a in artifacts]
    assert len(paths) == 4 and len(set(paths)) == 4 and all(p.endswith(".memory_snapshot.pickle") for p in paths)
    on_disk = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*.pickle"))
    assert on_disk == sorted(paths)
    assert all(pickle.loads((run_dir / p).read_bytes())["device_traces"] for p in paths)
    assert not [r for r in read_records([run_dir]) if r["type"] == "error"]


def test_dump_on_oom_false_attaches_nothing(make_config, run_training, monkeypatch):
    recorder = RecorderStandIn(monkeypatch)
    run_training(memory_config(make_config, {"dump_on_oom": False}))
    assert recorder.observers == []


@pytest.mark.cuda
@needs_cuda
def test_a_real_snapshot_per_capture_opens_in_the_memory_viewer(make_config, run_training, tmp_path):
    import pickle

    run = run_training(memory_config(make_config, tool=["torch", "torch_memory"]), device="cuda")
    snapshots = run.files("torch_memory")
    assert [p.name for p in snapshots] == ["rank0.memory_snapshot.pickle"] * 2
    for path in snapshots:
        snapshot = pickle.loads(path.read_bytes())
        events = [e for trace in snapshot["device_traces"] for e in trace]
        assert any(e["action"] == "alloc" for e in events)
        html = tmp_path / f"{path.parent.parent.parent.name}.html"
        subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(html)], check=True)
        assert html.stat().st_size > 0


@pytest.mark.cuda
@needs_cuda
def test_a_real_oom_writes_a_snapshot_holding_the_failed_allocation(make_config):
    import pickle

    prof = rlprof.Profiler(memory_config(make_config), roles=("actor",))
    prof.start_step(1)
    total = torch.cuda.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError):
        with prof.role("actor", "update"):
            torch.empty(total + (1 << 30), dtype=torch.uint8, device="cuda")
    prof.step_boundary()
    [oom] = [a for a in prof.finalize() if a.get("trigger") == "oom"]
    snapshot = pickle.loads((prof.run.run_dir / oom["path"]).read_bytes())
    assert any(e["action"] == "oom" for trace in snapshot["device_traces"] for e in trace)


def test_memory_snapshot_num_steps_is_the_core_s_grouping_key():
    """torch_memory never counts steps: its validated ``memory_snapshot_num_steps`` is the key the core
    groups by (rlprof.runtime.groups), and the backend writes when ``ctx.ends_group`` says so."""
    from rlprof.context import Capture
    from rlprof.runtime.groups import GROUP_KEY, StepGroups

    groups, config = StepGroups(), validate({"memory_snapshot_num_steps": 2}, "t")
    assert GROUP_KEY == "memory_snapshot_num_steps" and config[GROUP_KEY] == 2
    windows = [Capture(capture_id=f"step{s}", steps=(s,), regions=(), directory=Path("/x")) for s in (1, 2, 3)]
    assert [groups.close("torch_memory", config, w) for w in windows] == [(), (1, 2), ()]
    assert groups.finish("torch_memory", config, None) == (3,)
    assert groups.close("torch_memory", validate({}, "t"), windows[0]) == (1,)  # default: a snapshot per window
