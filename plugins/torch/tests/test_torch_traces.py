"""The torch backend through the real Profiler: real traces on CPU, read back and checked."""

from __future__ import annotations

import logging

import pytest
import torch

import rlprof
from rlprof.installed import discover, distribution_of

REGIONS = ("ref_compute_log_prob", "actor_update")


def test_backends_are_found_through_their_entry_points(run_training):
    eps = discover()
    assert distribution_of(eps["torch"])[0] == "rlprof-torch"
    assert distribution_of(eps["torch_memory"])[0] == "rlprof-torch"
    run = run_training(steps=(1,), tool="torch")
    assert type(run.profiler.backends.plugins["torch"]).__name__ == "TorchBackend"


def test_end_to_end_writes_one_trace_per_step_with_both_roles(run_training):
    run = run_training(steps=(1, 2, 3))  # steps [1, 2] are profiled, 3 is not
    traces = run.traces()
    assert [record["capture"] for record, _ in traces] == ["step1", "step2"]
    for (record, trace), step in zip(traces, (1, 2)):
        assert record["step"] == step and record["mode"] == "e2e" and set(record["roles"]) == {"actor", "ref"}
        counts = trace.annotations()
        assert counts["ref_compute_log_prob"] == 1 and counts["actor_update"] == 1
        assert counts[f"ProfilerStep#{step}"] == 1
        assert counts["micro_batch"] == 2
        ops = {e["name"] for e in trace.events if e.get("cat") == "cpu_op"}
        assert "aten::linear" in ops and "aten::mm" in ops
        assert record["path"].endswith("torch/rank0.pt.trace.json.gz") and record["size"] > 0


def test_discrete_writes_one_trace_per_region(run_training):
    run = run_training(torch_config={"discrete": True})
    traces = run.traces()
    assert [record["capture"] for record, _ in traces] == [
        "step1.ref_compute_log_prob", "step1.actor_update", "step2.ref_compute_log_prob", "step2.actor_update",
    ]
    for record, trace in traces:
        assert record["mode"] == "discrete"
        counts = trace.annotations()
        mine = record["capture"].split(".", 1)[1]
        other = next(r for r in REGIONS if r != mine)
        assert counts[mine] == 1 and counts[other] == 0
        assert counts[f"ProfilerStep#{record['step']}"] == 1
        assert trace["rlprof"]["regions"] == [mine]


def test_merged_steps_are_one_trace_marked_per_step(make_config, run_training):
    config = make_config()
    config["global_profiler"]["profile_continuous_steps"] = True
    traces = run_training(config).traces()
    assert len(traces) == 1
    record, trace = traces[0]
    assert record["capture"] == "step1-2" and record["steps"] == [1, 2]
    counts = trace.annotations()
    assert counts["ProfilerStep#1"] == counts["ProfilerStep#2"] == 1
    assert counts["actor_update"] == counts["ref_compute_log_prob"] == 2
    assert trace["rlprof"]["training_steps"] == [1, 2]


def test_trace_metadata_names_run_rank_world_and_steps(run_training):
    run = run_training(rank=1, world_size=4, run_id="meta-run")
    record, trace = run.traces()[0]
    assert trace["distributedInfo"] == {"backend": "none", "rank": 1, "world_size": 4}
    meta = trace["rlprof"]
    assert meta["run_id"] == "meta-run" and meta["global_rank"] == 1 and meta["world_size"] == 4
    assert meta["capture"] == record["capture"] == "step1"
    assert meta["training_steps"] == [1]
    assert meta["roles"] == ["ref", "actor"] and meta["regions"] == list(REGIONS)
    assert record["path"].endswith("rank1.pt.trace.json.gz")


@pytest.mark.parametrize(
    ("content", "present"),
    [
        ("shapes", lambda events: any("Input Dims" in e.get("args", {}) for e in events)),
        ("memory", lambda events: any(e["name"] == "[memory]" and "Bytes" in e.get("args", {}) for e in events)),
        ("stack", lambda events: any(e.get("cat") == "python_function" for e in events)),
    ],
)
def test_contents_switch_on_what_they_name(run_training, content, present):
    # flops off: counting FLOPs records every op's shapes (issue 49), which "shapes" is here to switch on
    plain = run_training(steps=(1,), torch_config={"contents": ["cpu"], "flops": False}).traces()[0][1]
    richer = run_training(steps=(1,), torch_config={"contents": ["cpu", content], "flops": False}).traces()[0][1]
    assert not present(plain.events)
    assert present(richer.events)
    assert richer.count("actor_update") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the notice given when CUDA is missing")
def test_cuda_asked_without_cuda_traces_cpu_and_says_so_once(run_training, caplog):
    # Said once per process; the conftest's nothing_said_yet forgets what earlier tests said.
    with caplog.at_level(logging.WARNING, logger="rlprof.torch"):
        run = run_training(torch_config={"contents": ["cuda", "cpu"]})
    notices = [r for r in caplog.records if "cuda" in r.getMessage() and r.name == "rlprof.torch"]
    assert len(notices) == 1
    assert len(run.traces()) == 2 and not run.profiler.errors


def test_region_that_raises_still_writes_its_trace(make_config, read_trace):
    prof = rlprof.Profiler(make_config(torch_config={"discrete": True}), roles=("actor",))
    prof.start_step(1)
    with pytest.raises(ZeroDivisionError):
        with prof.role("actor", "update"):
            torch.ones(3).sum()
            1 / 0
    prof.step_boundary()
    records = prof.finalize()
    assert [r["capture"] for r in records] == ["step1.actor_update"] and not prof.errors
    assert read_trace(prof.run.run_dir / records[0]["path"]).count("actor_update") == 1


def test_finalize_mid_step_saves_the_open_capture_once(make_config, read_trace):
    prof = rlprof.Profiler(make_config(), roles=("actor",))
    prof.start_step(1)
    region = prof.role("actor", "update")
    region.__enter__()
    torch.randn(4, 4).sum()
    first = prof.finalize()
    assert len(first) == 1 and first[0]["capture"] == "step1"
    trace = read_trace(prof.run.run_dir / first[0]["path"])
    assert trace.count("actor_update") == 1 and trace.count("ProfilerStep#1") == 1
    assert prof.finalize() == first
    region.__exit__(None, None, None)


@pytest.mark.parametrize(
    ("torch_config", "message"),
    [
        ({"contents": ["cpu", "gpu"]}, "tool_config.torch.contents: got 'gpu'"),
        ({"contents": "cpu"}, "tool_config.torch.contents: got 'cpu' (str)"),
        ({"contnets": ["cpu"]}, "tool_config.torch.contnets: unknown key (did you mean 'contents'?)"),
    ],
)
def test_bad_tool_config_is_a_config_error_naming_the_key(make_config, torch_config, message):
    with pytest.raises(rlprof.ConfigError) as caught:
        rlprof.Profiler(make_config(torch_config=torch_config), roles=("actor",))
    assert f"actor_rollout_ref.actor.profiler.{message}" in str(caught.value)
    assert "allowed" in str(caught.value) or "known keys" in str(caught.value)


def test_verl_keys_are_accepted_and_ignored(make_config):
    verl_section = {"contents": [], "step_start": 0, "step_end": None, "manual_save": True, "name": "torch",
                    "_target_": "verl.utils.profiler.config.TorchProfilerToolConfig"}
    prof = rlprof.Profiler(make_config(torch_config=verl_section), roles=("actor",))
    assert prof.tool_configs["actor"]["torch"] == {"contents": (), "flops": True}
    prof.finalize()


def test_global_tool_config_is_merged_under_the_role_section(make_config, run_training):
    config = make_config()
    config["global_profiler"]["global_tool_config"] = {"torch": {"contents": ["cpu", "shapes"]}}
    run = run_training(config, steps=(1,))
    trace = run.traces()[0][1]
    assert trace.get("record_shapes") == 1



def test_sampled_region_holds_exactly_the_active_micro_batch(run_training):
    run = run_training(torch_config={"discrete": True}, actor={"schedule": {"active": 1}}, micro_batches=16)
    actor = [(record, trace) for record, trace in run.traces() if record["region"] == "actor_update"]
    assert [record["capture"] for record, _ in actor] == ["step1.actor_update", "step2.actor_update"]
    for record, trace in actor:
        assert record["iterations"] == [0, 0]
        assert trace.count("micro_batch") == 1 and trace.count("actor_update") == 1
        # the model has two Linear layers: one micro-batch's forward, not sixteen
        assert sum(e["name"] == "aten::linear" for e in trace.events) == 2


def test_torch_distributed_info_is_left_as_torch_wrote_it(run_training, tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        trace = run_training(steps=(1,)).traces()[0][1]
    finally:
        dist.destroy_process_group()
    info = trace["distributedInfo"]
    assert info["backend"] == "gloo" and info["rank"] == 0 and info["world_size"] == 1
    assert "pg_count" in info  # torch's block, not rlprof's


def _knows_trace_only() -> bool:
    try:
        from torch._C._profiler import _ExperimentalConfig

        _ExperimentalConfig(trace_only=True)
    except (ImportError, TypeError):
        return False
    return True


@pytest.mark.parametrize(("contents", "trace_only"), [(("cpu",), True), (("cpu", "memory", "shapes"), True),
                                                      (("cpu", "stack"), False)])
def test_stop_skips_the_event_tree_except_for_stacks(contents, trace_only, recwarn):
    # Stopping runs on the training thread; the event tree only key_averages() reads cost a third of it.
    from rlprof_torch.options import profile_arguments

    profile = torch.profiler.profile(**profile_arguments(contents, torch.cuda.is_available()))
    # asked for wherever this torch knows the setting (torch 2.11 does not: seen on a GPU machine)
    assert bool(profile.experimental_config and profile.experimental_config.trace_only) is (trace_only and _knows_trace_only())
    assert not [w for w in recwarn if "trace_only" in str(w.message)]  # never asked where torch refuses it
