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
