"""A rollout replica server's own regions in an async run (rlprof.integrations.verl.server_regions).

verl's fully async trainer stops a replica's profiling just before the weight sync that ends its version
and starts it right after; the server is a real ``RolloutDistProfiler`` with torch, driven in verl's order
on an event loop, the server shaped like verl's (``abort_all_requests``, ``update_weights``,
``resume_generation``, a generate call). What a user must get: the replica's step of version N holds
its generation and the pause of the sync that ends N (abort to resume, the load and the resume inside),
so that its capture and the trainer's share the version's window; a synchronous server (never aborted)
keeps one step-long ``rollout_generate``, as before.
"""

import asyncio
import time

import pytest

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig  # noqa: E402

from rlprof.integrations.verl.server_regions import wrap_server  # noqa: E402
from rlprof.manifest import read_records  # noqa: E402
from rlprof.verl import build_rollout_dist_profiler  # noqa: E402


@pytest.fixture(autouse=True)
def one_run(monkeypatch, tmp_path):
    monkeypatch.setenv("RLPROF_RUN_ID", f"server-regions-{tmp_path.name}")
    monkeypatch.delenv("WORLD_SIZE", raising=False)


class Server:
    """verl's server API, as the example's ``hf`` server has it (generation on the loop here)."""

    def __init__(self, controller):
        self.profiler_controller = controller
        self.gate_passed_ns: list[int] = []
        """When each generate call left the gate (``time.time_ns()``, the records' clock)."""

    def _generate(self):
        import torch

        x = torch.ones(8)
        for _ in range(50):
            x = x + 1
        return x

    async def generate(self):
        await asyncio.sleep(0.005)  # waiting at the gate: not generating
        self.gate_passed_ns.append(time.time_ns())
        return self._generate()

    async def abort_all_requests(self):
        await asyncio.sleep(0.002)

    async def update_weights(self):
        await asyncio.sleep(0.01)

    async def resume_generation(self):
        await asyncio.sleep(0.002)


def make_server(tmp_path):
    class Wrapped(Server):
        pass

    wrap_server(Wrapped, generate="_generate")
    config = ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path), all_ranks=True,
                            tool_config=TorchProfilerToolConfig(contents=["cpu"]))
    return Wrapped(build_rollout_dist_profiler(0, 1, config=config, tool_config=config.tool_config))


async def sync(server):
    await server.abort_all_requests()
    await server.update_weights()
    await server.resume_generation()


def regions(tmp_path):
    records = list(read_records(tmp_path.glob("*/manifest/*.jsonl")))
    steps = {r["step"]: r for r in records if r["type"] == "step"}
    return steps, [r for r in records if r["type"] == "region"], records


@pytest.mark.timing
def test_an_async_replicas_step_holds_its_generation_and_the_pause_of_the_sync_that_ends_it(tmp_path):
    server = make_server(tmp_path)
    controller = server.profiler_controller

    async def run():
        await sync(server)  # verl's first sync, before training: nothing profiled
        controller.start(profile_step=2)  # after the sync that ends the trainer's step 1
        await server.generate()
        await server.generate()
        controller.stop()  # verl: just before the sync that ends step 2
        await server.generate()  # the request in flight when the sync begins
        await sync(server)
        await server.generate()  # version 3, unprofiled

    asyncio.run(run())
    controller.finalize()
    steps, found, records = regions(tmp_path)
    assert sorted(steps) == [2]
    names = [r["region"] for r in found]
    assert names.count("rollout_generate") == 3 and names.count("rollout_weight_pause") == 1, names
    generate = [r for r in found if r["region"] == "rollout_generate"]
    # the model's call, not the gate's wait: each region starts after its call left the gate (an order on one
    # clock; before, a bound of 5 ms on the call, which a busy machine can stretch)
    starts = sorted(r["start_ns"] for r in generate)
    assert all(passed <= start for passed, start in zip(server.gate_passed_ns, starts)), (server.gate_passed_ns, starts)
    [pause] = [r for r in found if r["region"] == "rollout_weight_pause"]
    for inside in ("rollout_weight_load", "rollout_resume"):
        [r] = [r for r in found if r["region"] == inside]
        assert pause["start_ns"] <= r["start_ns"] <= r["end_ns"] <= pause["end_ns"], inside
    assert steps[2]["end_ns"] >= pause["end_ns"]  # the step ended after the sync's resume, not at verl's stop
    assert [r["step"] for r in records if r["type"] == "artifact" and r.get("state") == "written"] == [2]


@pytest.mark.timing
def test_a_synchronous_replica_keeps_one_step_long_generate_and_closes_at_stop(tmp_path):
    server = make_server(tmp_path)
    controller = server.profiler_controller

    async def run():
        controller.start(profile_step=1)
        await server.generate()
        controller.stop()
        await asyncio.sleep(0.05)

    asyncio.run(run())
    controller.finalize()
    steps, found, _ = regions(tmp_path)
    assert sorted(steps) == [1]
    assert [r["region"] for r in found] == ["rollout_generate"]
    assert found[0]["end_ns"] - found[0]["start_ns"] >= 0.005e9  # from start to stop, the gate's wait included


@pytest.mark.timing
def test_a_replica_paused_before_its_step_began_is_finalized_at_the_runs_last_step(tmp_path):
    """verl's V1 separate_async trainer with ``hybrid_rollout.enable_switch``: the trainer's own replica is switched
    back to training (``abort_all_requests``) at the top of a step, before its profiling starts, and stopped in
    ``on_step_end``; it resumes only if the trainer lends it to rollout again, which it never does after the last
    step. Before, its stop waited for that resume: the replica stayed inside its step, the end of the run's
    profiling (``last``) never finalized it, and Ray ended the actor with its capture open ("2 of 3 profiling
    processes finalized"). Its step ends at the stop, with its capture written."""
    from rlprof.integrations.verl import run_signals
    from rlprof.integrations.verl.dist_profiler import _finalize_process

    server = make_server(tmp_path)
    controller = server.profiler_controller

    async def run():
        await sync(server)  # lent to rollout at the end of step 1 (switch_to_rollout: weights, resume)
        await server.generate()
        await server.abort_all_requests()  # step 2's on_step_begin: switch_to_trainer
        controller.start(profile_step=2)  # _start_profiling
        controller.stop()  # on_step_end: _stop_rollout_profiling; no switch to rollout follows

    asyncio.run(run())
    assert _finalize_process(controller.profiler.run.run_id, run_signals.LAST)  # the run's last profiled step ended
    assert controller.profiler.finalized
    steps, found, records = regions(tmp_path)
    assert sorted(steps) == [2]
    assert [r["step"] for r in records if r["type"] == "artifact" and r.get("state") == "written"] == [2]
