"""A rollout replica whose inference engine profiles itself (verl's vLLM server), without starting an engine.

What the server asks rlprof before its engine exists: whether to profile (verl's ``_should_profile()``)
and the engine's profiler settings. The engine itself runs in tests/integrations/test_verl_vllm_server.py.
"""

import asyncio
from pathlib import Path

import pytest

from rlprof.manifest import read_records

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from rlprof.verl import build_rollout_dist_profiler  # noqa: E402

from kv_stand_in import StandInKV  # noqa: E402


@pytest.fixture(autouse=True)
def run_id(monkeypatch, request):
    """One run id for the profilers of a test, as ``install()`` gives every process of a verl run."""
    value = f"engine-{request.node.name[:40]}"
    monkeypatch.setenv("RLPROF_RUN_ID", value)
    return value


def section(save_path, **extra):
    return {"tool": "torch", "enable": True, "save_path": str(save_path), **extra}


WINDOW = {"contents": ["cpu", "stack"], "discrete": True, "profile_token_start": 2, "profile_token_end": 6}


def test_the_selected_replicas_engine_writes_inside_the_run_with_rlprofs_window(tmp_path, run_id):
    # ranks are replica ranks, whatever GPUs a replica spans
    replicas = [build_rollout_dist_profiler(r, 2, config=section(tmp_path, ranks=[1]), tool_config=WINDOW, engine="vllm")
                for r in (0, 1)]
    assert [r.engine_profiled() for r in replicas] == [False, True]
    assert replicas[0].engine_kwargs() == {}
    config = replicas[1].engine_kwargs()["profiler_config"]
    assert Path(config["torch_profiler_dir"]).resolve().is_relative_to((tmp_path / run_id).resolve())
    assert (config["delay_iterations"], config["max_iterations"]) == (2, 4)  # verl's mapping of [start, end)
    assert config["torch_profiler_with_stack"] and not config["torch_profiler_record_shapes"]
    for replica in replicas:
        replica.finalize()
    assert not list(tmp_path.glob("agent_loop_rollout_replica_*"))
    processes = [r for r in read_records([tmp_path]) if r["type"] == "process"]
    assert [p["replica_rank"] for p in processes] == [1]  # replica 0 is no participant at all


def test_an_engine_rlprof_cannot_drive_leaves_the_server_unprofiled_with_an_error_record(tmp_path):
    replica = build_rollout_dist_profiler(0, 1, config=section(tmp_path, all_ranks=True), tool_config=WINDOW,
                                          engine="no-such-engine")
    assert replica.engine_profiled() is False  # verl's server then builds its engine without a profiler
    assert replica.engine_kwargs() == {}
    asyncio.run(replica.start_engine(object()))  # verl's start_profile()/stop_profile(): nothing raised
    asyncio.run(replica.stop_engine(object()))
    replica.finalize()
    (error,) = [r for r in read_records([tmp_path]) if r["type"] == "error"]
    assert "no-such-engine" in error["error"] and error["replica_rank"] == 0


@pytest.fixture
def shared_store(monkeypatch):
    from rlprof.integrations.verl import run_signals

    store = StandInKV()  # Ray's internal key-value store as run_signals uses it (the run's processes share it)
    monkeypatch.setattr(run_signals, "_kv", lambda: store)
    monkeypatch.setattr(run_signals, "watch", lambda run_id, finalize, run_dir=None: None)  # no run-end thread in a unit test
    return store


@pytest.mark.parametrize("engine", ["vllm", None])  # verl's vLLM server; a server generating in its own process
def test_with_nsys_verl_drops_the_servers_section_yet_the_replica_times_generate_and_says_why(tmp_path, shared_store,
                                                                                            engine):
    from rlprof.analysis.verdict import verdict

    # the training worker hosting the rollout role is built first and publishes the rollout's section; verl's
    # server then builds its controller with config=None ("agent loop only support torch and npu profiler")
    nsys = {"tool": "nsys", "enable": True, "all_ranks": True, "save_path": str(tmp_path)}
    trainer = actor_rollout_ref_worker(actor=nsys, rollout=nsys).profiler
    replica = build_rollout_dist_profiler(0, 1, config=None, tool_config=None, engine=engine)
    assert replica.check_enable() and replica.check_this_rank()  # what verl's hf-style _should_profile asks

    async def serve():  # the server's event loop: verl's async start_profile/stop_profile
        for step in (1, 2):
            if engine is None:
                replica.start(profile_step=step)
                replica.stop()
            else:
                await replica.start_engine(object(), profile_step=step)
                await replica.stop_engine(object())
            await asyncio.sleep(0.01)

    asyncio.run(serve())
    assert replica.engine_kwargs() == {}  # no engine profiler is configured for nsys
    replica.finalize()
    trainer.finalize()
    records = list(read_records([tmp_path]))
    (server,) = [r["pid"] for r in records if r["type"] == "process" and r["replica_rank"] == 0]
    generated = sorted((r["step"], r["region"]) for r in records if r["type"] == "region" and r["pid"] == server)
    assert generated == [(1, "rollout_generate"), (2, "rollout_generate")]
    assert not [r for r in records if r["type"] == "error"]
    lines = verdict([tmp_path]).lines
    why = [line for line in lines if line.startswith("skipped:") and "does not capture the rollout engine" in line]
    assert len(why) == 1 and "nsys" in why[0] and "torch or npu only" in why[0], lines  # once, for both steps
    assert why[0].startswith("skipped: replica 0: nsys captures step1, step2:"), why  # the replica, by its name


def actor_rollout_ref_worker(actor, rollout):
    """verl's fused worker: its profiler is built from the actor's section, its config holds the rollout's.
    (Its rank is 1: a session of its own in this test process, as in its own process in a run.)"""
    from rlprof.verl import DistProfiler, DistProfilerExtension

    class Worker(DistProfilerExtension):
        def __init__(self):
            self.config = {"actor": {"profiler": actor}, "rollout": {"profiler": rollout}}
            DistProfilerExtension.__init__(self, DistProfiler(rank=1, config=actor, tool_config={"discrete": False},
                                                              save_file_prefix="actor_rollout_ref"))

    return Worker()


@pytest.mark.parametrize("published", [False, True])
def test_a_server_verl_gave_no_section_stays_out_unless_the_rollouts_own_section_profiles(tmp_path, shared_store,
                                                                                       published):
    if published:  # the actor profiles, the rollout's own section does not (verl's precision guide does this)
        actor = {"tool": "nsys", "enable": True, "all_ranks": True, "save_path": str(tmp_path)}
        worker = actor_rollout_ref_worker(actor=actor, rollout={"tool": "nsys", "enable": False})
    replica = build_rollout_dist_profiler(0, 1, config=None, tool_config=None)
    assert not replica.check_enable()
    replica.start(profile_step=1)
    replica.stop()
    replica.finalize()
    if published:
        worker.profiler.finalize()
    assert not [r for r in read_records([tmp_path]) if r.get("replica_rank") is not None or r["type"] == "region"]
