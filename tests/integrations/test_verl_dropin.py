"""The drop-in's behaviour as verl's own profiler tests state it (tests/utils/test_torch_profile.py,
test_nvtx_profile.py, test_special_mstx_profile.py, test_server_profiler.py of verl), re-expressed
against the verl 0.9.1 wheel: verl's config dataclasses in, rlprof's ``DistProfiler`` under test.
Where rlprof deliberately differs (``ranks: []``), the test says so.
"""

import logging
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from verl.utils.profiler.config import NPUToolConfig, ProfilerConfig, TorchProfilerScheduleConfig, TorchProfilerToolConfig  # noqa: E402

from rlprof.manifest import read_records  # noqa: E402
from rlprof.verl import DistProfiler, build_rollout_dist_profiler  # noqa: E402


@pytest.fixture(autouse=True)
def one_run(monkeypatch, tmp_path):
    """Each test is its own training run (the Profilers of one run and rank share a process session)."""
    monkeypatch.setenv("RLPROF_RUN_ID", f"dropin-{tmp_path.name}")
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def torch_config(save_path, discrete=False, **kwargs):
    tool_config = TorchProfilerToolConfig(contents=["cpu"], discrete=discrete)
    return ProfilerConfig(tool="torch", enable=True, save_path=str(save_path), tool_config=tool_config, **kwargs), tool_config


class Worker:
    def __init__(self, profiler):
        self.profiler = profiler
        self.calls = 0

    @DistProfiler.annotate(role="actor_update", scheduled=True)
    def update_actor(self, mini_batches):
        for _ in range(mini_batches):
            self.profiler.step()
        return "updated"

    @DistProfiler.annotate(message="custom_label", role="actor_compute_log_prob")
    def compute_log_prob(self):
        return "log_prob"

    @DistProfiler.annotate(role="train_batch")
    def train_batch(self):
        return "trained"

    @DistProfiler.annotate()
    def generate_sequences(self):
        return "generated"

    @DistProfiler.annotate(role="boom")
    def boom(self):
        self.calls += 1
        raise RuntimeError("stage failed on purpose")


def regions(save_path):
    return sorted({r["region"] for r in read_records([save_path]) if r["type"] == "region"})


# ------------------------------------------------------------------------ rank, enable, step queries


def test_rank_selection_and_enable(tmp_path):
    config = ProfilerConfig(enable=True, ranks=[1, 2], tool="npu", save_path=str(tmp_path))
    assert DistProfiler(rank=1, config=config, tool_config=NPUToolConfig()).check_this_rank()
    assert not DistProfiler(rank=3, config=config, tool_config=NPUToolConfig()).check_this_rank()
    disabled = DistProfiler(rank=0, config=ProfilerConfig(tool="npu"), tool_config=NPUToolConfig())
    assert not disabled.check_enable()  # verl's defaults: enable=False, save_path/tool_config left "???"
    every = DistProfiler(rank=0, config=ProfilerConfig(enable=True, all_ranks=True, tool="npu", save_path=str(tmp_path)))
    assert every.check_enable() and every.check_this_rank() and not every.check_this_step()
    nothing = DistProfiler(rank=0, config=None)
    assert not nothing.check_enable() and nothing.step() is None


@pytest.mark.parametrize("tool", [None, "torch"])
@pytest.mark.parametrize("enable", [True, False])
@pytest.mark.parametrize("selection", [{"all_ranks": True}, {"ranks": [1]}, {"ranks": [0, 2]}, {"ranks": []}],
                         ids=["all_ranks", "ranks=[1]", "ranks=[0,2]", "ranks=[]"])
def test_check_this_rank_answers_as_verls_own(tmp_path, tool, enable, selection):
    """verl 0.9.1's DistProfiler answers check_this_rank from rank selection alone: with no tool (its
    no-op profiler) and with enable=false it still says True for a selected rank (its callers pair it
    with check_enable()). The drop-in answers the same, but for the deliberate ``ranks: []`` rule:
    no rank, where verl falls back to rank 0 when enabled."""
    from verl.utils.profiler.profile import DistProfiler as VerlDistProfiler

    tool_config = TorchProfilerToolConfig(contents=["cpu"]) if tool else None
    config = ProfilerConfig(tool=tool, enable=enable, save_path=str(tmp_path), tool_config=tool_config, **selection)
    for rank in range(3):
        ours = DistProfiler(rank=rank, config=config, tool_config=tool_config)
        verls = VerlDistProfiler(rank=rank, config=config, tool_config=tool_config).check_this_rank()
        expected = False if selection == {"ranks": []} else verls
        assert ours.check_this_rank() is expected, (rank, verls)
        assert ours.check_enable() is enable
        ours.finalize()


def test_start_and_stop_set_this_step_only_on_selected_ranks(tmp_path):
    config, tool_config = torch_config(tmp_path, ranks=[0])
    selected, other = (DistProfiler(rank=r, config=config, tool_config=tool_config) for r in (0, 1))
    for profiler in (selected, other):
        profiler.start(role="train", profile_step="1")  # verl's tests pass the step as a string too
    assert selected.check_this_step() and not other.check_this_step()
    for profiler in (selected, other):
        profiler.stop(run_command=False)
        profiler.finalize()
    assert not selected.check_this_step()
    assert {(r["rank"], r["step"]) for r in read_records([tmp_path]) if r["type"] == "artifact"} == {(0, 1)}


def test_ranks_outside_the_world_are_an_error_naming_key_value_and_world(tmp_path):
    from rlprof.errors import ConfigError

    config, tool_config = torch_config(tmp_path, ranks=[0, 9])
    with pytest.raises(ConfigError) as raised:
        DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor", world_size=8)
    message = str(raised.value)
    assert "profiler.ranks" in message and "[0, 9]" in message and "world of 8" in message


def test_tool_config_left_at_verl_default_and_schedule_name_are_accepted(tmp_path):
    """``ProfilerConfig(tool=..., enable=True)`` leaves tool_config at "???"; verl's schedule dataclass
    carries ``name``: neither is configuration, neither is rejected."""
    profiler = DistProfiler(rank=0, config=ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path)))
    assert profiler.check_this_rank()
    profiler.finalize()
    schedule = TorchProfilerScheduleConfig(wait=1, active=2, repeat=1)
    tool_config = TorchProfilerToolConfig(contents=["cpu"], discrete=True, schedule=schedule)
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path), tool_config=tool_config)
    scheduled = DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor")
    assert scheduled.tool_config is tool_config  # rollout servers read it
    assert scheduled.profiler.config.roles["actor"].schedule.active == 2
    scheduled.finalize()


# ------------------------------------------------------------------------ annotate


@pytest.mark.parametrize("discrete", [False, True])
def test_annotate_names_ranges_message_or_role_or_function(tmp_path, discrete):
    config, tool_config = torch_config(tmp_path, discrete=discrete, all_ranks=True)
    worker = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref"))
    worker.profiler.start(role="train", profile_step=1)
    assert worker.compute_log_prob() == "log_prob" and worker.train_batch() == "trained"
    assert worker.generate_sequences() == "generated"
    worker.profiler.stop(run_command=False)
    worker.profiler.finalize()
    # message wins over role; no role in the name: a stage of the worker's own role; no label: the function
    assert regions(tmp_path) == ["actor_custom_label", "actor_generate_sequences", "actor_train_batch"]


def test_critic_training_worker_train_batch_is_labelled_critic(tmp_path):
    config, tool_config = torch_config(tmp_path, all_ranks=True)
    worker = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="value_model"))
    worker.profiler.start(role="train", profile_step=1)
    worker.train_batch()
    worker.profiler.stop(run_command=False)
    worker.profiler.finalize()
    assert regions(tmp_path) == ["critic_train_batch"]
    process = [r for r in read_records([tmp_path]) if r["type"] == "process"]
    assert [p["roles"] for p in process] == [["critic"]]  # the manifest names only the role it hosts


def test_annotate_outside_a_profiled_step_runs_the_function_unprofiled(tmp_path):
    config, tool_config = torch_config(tmp_path, all_ranks=True)
    worker = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config))
    assert worker.update_actor(2) == "updated"  # before start(): nothing recorded
    worker.profiler.finalize()
    assert regions(tmp_path) == []
    assert Worker(None).train_batch() == "trained"  # a worker without a profiler


@pytest.mark.parametrize("profiled", [False, True])
def test_annotate_propagates_errors_and_runs_the_function_once(tmp_path, profiled):
    config, tool_config = torch_config(tmp_path, discrete=True, all_ranks=True)
    worker = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config))
    if profiled:
        worker.profiler.start(profile_step=1)
    with pytest.raises(RuntimeError, match="on purpose"):
        worker.boom()
    assert worker.calls == 1
    if profiled:
        worker.profiler.stop(run_command=False)
        assert [r["error"] for r in read_records([tmp_path]) if r["type"] == "region"] == ["RuntimeError: stage failed on purpose"]
    worker.profiler.finalize()


def test_step_advances_the_scheduled_update_loop(tmp_path):
    """``tool_config.torch.schedule`` samples the update's mini-batches, advanced by ``step()``."""
    schedule = TorchProfilerScheduleConfig(skip_first=1, active=2, repeat=1)
    tool_config = TorchProfilerToolConfig(contents=["cpu"], discrete=True, schedule=schedule)
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path), tool_config=tool_config)
    worker = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config))
    worker.profiler.start(profile_step=1)
    worker.update_actor(5)
    worker.profiler.stop(run_command=False)
    worker.profiler.finalize()
    windows = [r["iterations"] for r in read_records([tmp_path]) if r["type"] == "artifact"]
    assert windows == [[1, 2]]


def test_only_the_scheduled_stage_is_sampled(tmp_path):
    """verl: the schedule narrows the update loop (``scheduled=True``); log-prob stays whole."""
    schedule = TorchProfilerScheduleConfig(skip_first=1, active=1, repeat=1)
    tool_config = TorchProfilerToolConfig(contents=["cpu"], discrete=True, schedule=schedule)
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path), tool_config=tool_config)
    worker = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref"))
    worker.profiler.start(profile_step=1)
    worker.compute_log_prob()
    worker.update_actor(3)
    worker.profiler.stop(run_command=False)
    worker.profiler.finalize()
    artifacts = [r for r in read_records([tmp_path]) if r["type"] == "artifact"]
    assert [(a["region"], a["iterations"]) for a in artifacts] == [("actor_custom_label", None), ("actor_update", [1, 1])]


def test_inner_training_worker_step_advances_the_outer_workers_update(tmp_path):
    """verl's ActorRolloutRefWorker is started by the trainer; its inner actor TrainingWorker (own
    DistProfiler, ``save_file_prefix="language_model"``, never started) calls ``step()`` per mini-batch."""
    schedule = TorchProfilerScheduleConfig(skip_first=1, active=2, repeat=1)
    tool_config = TorchProfilerToolConfig(contents=["cpu"], discrete=True, schedule=schedule)
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path), tool_config=tool_config)
    outer = DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref")
    inner = Worker(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="language_model"))

    class Outer:
        profiler = outer

        @DistProfiler.annotate(role="actor_update", scheduled=True)
        def update_actor(self):
            for _ in range(5):
                inner.train_batch()  # not started: runs unprofiled, as in verl
                inner.profiler.step()

    outer.start(profile_step=1)
    Outer().update_actor()
    outer.stop(run_command=False)
    inner.profiler.finalize()
    outer.finalize()
    artifacts = [r for r in read_records([tmp_path]) if r["type"] == "artifact"]
    assert [(a["region"], a["iterations"]) for a in artifacts] == [("actor_update", [1, 2])]


# ------------------------------------------------------------------------ rollout replicas


@pytest.mark.parametrize("replica, world, ranks, selected", [
    (0, 8, [0, 1], True), (1, 8, [0, 1], True), (2, 8, [0, 1], False),  # replica ranks, whatever a replica's GPUs
    (1, 8, [8], False), (8, 8, [8], True),  # 8 is replica 8, never "the replica holding GPU 8" (verl 0.9.1's reading)
    (0, 1, [0, 8], True), (8, 1, [0, 8], True), (1, 1, [0, 8], False),
])
def test_rollout_ranks_are_replica_ranks(replica, world, ranks, selected):
    config = ProfilerConfig(tool=None, enable=True, save_path="/tmp/unused", tool_config=None, ranks=ranks)
    profiler = build_rollout_dist_profiler(replica, world, config=config)
    assert (profiler.check_enable() and profiler.check_this_rank()) is selected
    assert list(config.ranks) == ranks  # the caller's config is left alone


def test_ranks_that_look_like_global_gpu_ranks_are_said_once_with_the_replicas_they_mean(caplog):
    from rlprof import notices

    notices.forget()
    config = ProfilerConfig(tool=None, enable=True, save_path="/tmp/unused", tool_config=None, ranks=[4])
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        chosen = [build_rollout_dist_profiler(r, 4, config=config).check_this_rank() for r in range(2)]
        agreeing = ProfilerConfig(tool=None, enable=True, save_path="/tmp/unused", tool_config=None, ranks=[0])
        build_rollout_dist_profiler(0, 4, config=agreeing)  # both readings agree: nothing said
        build_rollout_dist_profiler(0, 1, config=config)  # one GPU per replica: both readings agree
    assert chosen == [False, False]  # replica 4, which this 8-GPU job does not have; not replica 1
    said = [r.getMessage() for r in caplog.records if "count replica ranks" in r.getMessage()]
    assert len(said) == 1
    assert "actor_rollout_ref.rollout.profiler.ranks" in said[0] and "write ranks: [1]" in said[0]


def test_all_ranks_profiles_every_replica_and_empty_ranks_none(caplog):
    from rlprof import notices

    notices.forget()  # an earlier test of this process may have said it already
    every = ProfilerConfig(tool=None, enable=True, save_path="/tmp/unused", tool_config=None, all_ranks=True, ranks=[0])
    assert all(build_rollout_dist_profiler(r, 8, config=every).check_this_rank() for r in range(4))
    # rlprof's one rule, from verl's guides: ranks [] collects nothing (verl 0.9 picks replica 0); said once
    empty = ProfilerConfig(tool=None, enable=True, save_path="/tmp/unused", tool_config=None, ranks=[])
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        chosen = [build_rollout_dist_profiler(r, 8, config=empty).check_this_rank() for r in range(3)]
    assert chosen == [False, False, False]
    warnings = [r.getMessage() for r in caplog.records if "ranks is []" in r.getMessage()]
    assert len(warnings) == 1 and "actor_rollout_ref.rollout.profiler.ranks" in warnings[0]


# ------------------------------------------------------------------------ finish hook


def hook_config(save_path, cmd, **kwargs):
    tool_config = TorchProfilerToolConfig(contents=["cpu"], discrete=True)
    return ProfilerConfig(tool="torch", enable=True, ranks=[0], save_path=str(save_path), tool_config=tool_config,
                          finish_hook_cmd=cmd, **kwargs)


def test_finish_hook_runs_once_synchronously_on_the_last_step_with_verl_variables(tmp_path):
    out = tmp_path / "env"
    cmd = f'echo "$VERL_PROFILE_SAVE_PATH $VERL_PROFILE_TOOL $VERL_PROFILE_RANK $VERL_PROFILE_ROLE $RLPROF_RUN_ID" >> {out}'
    profiler = DistProfiler(rank=0, config=hook_config(tmp_path, cmd), save_file_prefix="actor")
    profiler.start(profile_step=1)
    profiler.stop(run_command=False)
    assert not out.exists()  # not the last profiled step yet
    profiler.start(profile_step=2)
    profiler.stop(run_command=True)
    assert out.read_text().split() == [str(tmp_path), "torch", "0", "actor", f"dropin-{tmp_path.name}"]  # done when stop() returns
    profiler.finalize()
    assert len(out.read_text().splitlines()) == 1


def test_run_finish_hook_without_stop_and_only_on_selected_ranks(tmp_path):
    marker = tmp_path / "hook_ran"
    DistProfiler(rank=0, config=hook_config(tmp_path, f"touch {marker}", finish_hook_ranks=[3])).run_finish_hook()
    assert not marker.exists()
    DistProfiler(rank=0, config=hook_config(tmp_path, f"touch {marker}")).run_finish_hook(run_command=False)
    assert not marker.exists()
    DistProfiler(rank=0, config=hook_config(tmp_path, f"touch {marker}")).run_finish_hook()
    assert marker.exists()


def test_finish_hook_may_run_on_a_rank_that_did_not_profile(tmp_path, capfd):
    profiler = DistProfiler(rank=1, config=hook_config(tmp_path, "echo marker", finish_hook_ranks=[1]))
    assert not profiler.check_this_rank()
    profiler.stop(run_command=True)
    out = capfd.readouterr().out
    assert "[rlprof finish_hook] rank 1: marker" in out and "[rlprof finish_hook] rank 1: command exited with 0" in out


def test_finish_hook_failure_is_reported_never_raised(tmp_path, capfd):
    profiler = DistProfiler(rank=0, config=hook_config(tmp_path, "echo boom >&2; exit 3"))
    profiler.start(profile_step=1)
    profiler.stop(run_command=True)
    assert "[rlprof finish_hook] rank 0: command exited with 3" in capfd.readouterr().out
    profiler.finalize()


# ------------------------------------------------------------------------ the switch


def test_extension_methods_are_registered_one_to_all():
    from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch

    from rlprof.verl import DistProfilerExtension

    for name in ("start_profile", "stop_profile", "step_profile"):
        attrs = getattr(getattr(DistProfilerExtension, name), MAGIC_ATTR)
        assert attrs["dispatch_mode"] == Dispatch.ONE_TO_ALL


def test_module_runner_swaps_verl_classes_before_the_module_runs(tmp_path):
    (tmp_path / "fake_trainer.py").write_text(textwrap.dedent("""
        import os, sys
        from verl.utils.profiler import DistProfiler, DistProfilerExtension
        from verl.utils.profiler.profile import build_rollout_dist_profiler
        print(DistProfiler.__module__, DistProfilerExtension.__module__, build_rollout_dist_profiler.__module__)
        print(sys.argv[1:], os.environ["RLPROF_VERL"], bool(os.environ["RLPROF_RUN_ID"]))
    """))
    proc = subprocess.run([sys.executable, "-m", "rlprof.verl", "fake_trainer", "global_profiler.tool=torch"],
                          capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "rlprof.integrations.verl.dist_profiler rlprof.integrations.verl.extension rlprof.integrations.verl.rollout_profiler",
        "['global_profiler.tool=torch'] 1 True",
    ]


def test_verl_plugin_entry_point_swaps_only_when_switched_on(tmp_path):
    code = "import verl.utils.profiler as p; print(p.DistProfiler.__module__)"
    for env, expected in (({}, "verl.utils.profiler.profile"), ({"RLPROF_VERL": "1"}, "rlprof.integrations.verl.dist_profiler")):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                              env={"PATH": "/usr/bin:/bin", **env})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == expected


# ------------------------------------------------------------------------ a replica's export off the trainer's path


@pytest.mark.timing
def test_a_replica_server_answers_stop_profile_before_writing_its_trace_and_the_next_start_waits_on_the_record(tmp_path):
    import asyncio

    config, tool_config = torch_config(tmp_path, discrete=True, all_ranks=True)
    profiler = build_rollout_dist_profiler(0, 1, config=config, tool_config=tool_config)
    traces = []

    def listed():
        return [r for r in read_records(tmp_path.glob("*/manifest/*.jsonl")) if r["type"] == "artifact"]

    async def server():  # verl's async start_profile/stop_profile on the server's loop
        profiler.start(profile_step=1)
        await asyncio.sleep(0.01)  # generating
        profiler.stop()
        traces.append(len(listed()))  # stop_profile answers here: nothing written yet
        for _ in range(12_000):  # the trainer updates: the replica writes meanwhile (waited for, 120 s at most)
            if listed():
                break
            await asyncio.sleep(0.01)
        traces.append(len(listed()))
        profiler.start(profile_step=2)
        profiler.stop()
        profiler.start(profile_step=3)  # the next generate came before the export ran: it runs first, on the record
        profiler.stop()
        await asyncio.sleep(0.05)

    asyncio.run(server())
    profiler.finalize()
    assert traces == [0, 1]
    records = list(read_records(tmp_path.glob("*/manifest/*.jsonl")))
    assert sorted(r["step"] for r in records if r["type"] == "artifact") == [1, 2, 3]
    # (a "budget" wait may follow: step 3 began while step 2's trace was still being written)
    [wait] = [r for r in records if r["type"] == "profiling_wait" and r["source"] != "budget"]
    assert wait["step"] == 3 and wait["replica_rank"] == 0 and "next generate call" in wait["reason"]
    assert not [r for r in records if r["type"] in ("error", "skip")]


def test_a_replica_whose_loop_cancels_its_pending_close_still_writes_the_capture_on_that_loop(tmp_path):
    """An actor going away cancels what is pending on its loop, the replica's close among them (it waits
    ANSWER_GRACE_S after answering stop_profile): the close runs then, on the loop's thread where the
    profiler started, and the capture is written, not given up."""
    import asyncio

    config, tool_config = torch_config(tmp_path, all_ranks=True)
    profiler = build_rollout_dist_profiler(0, 1, config=config, tool_config=tool_config)

    async def server():
        profiler.start(profile_step=1)
        await asyncio.sleep(0.01)  # generating
        profiler.stop()  # answers; the close waits its grace
        pending = profiler._closing
        await asyncio.sleep(0)  # the close is waiting out its grace
        pending.cancel()  # the loop ends its tasks
        with pytest.raises(asyncio.CancelledError):
            await pending

    import threading

    loop_thread = threading.Thread(target=asyncio.run, args=(server(),))  # the server's loop is not the main thread
    loop_thread.start()
    loop_thread.join()
    profiler.finalize()  # the end of the run, on another thread: it could not stop the profiler itself
    records = list(read_records(tmp_path.glob("*/manifest/*.jsonl")))
    assert [(r["step"], r["state"]) for r in records if r["type"] == "artifact" and r.get("state") == "written"] == [(1, "written")]
    assert not [r for r in records if r["type"] == "error"]


def generate_ops(count: int) -> None:
    """What a replica's generate call leaves in its capture: ``3 * count`` CPU op events or so."""
    import torch

    x = torch.ones(4)
    for _ in range(count):
        x = x + 1


@pytest.mark.timing
def test_a_replica_that_generates_on_its_own_thread_answers_calls_while_its_capture_ends(tmp_path):
    """Issue 41: a server that generates on a thread of its own (examples/verl-cpu's ``hf`` server) starts the
    profiler there and hands it the close (``stop(executor=...)``): ``stop_profile`` answers at once, and a call
    that comes while the capture is being stopped (verl's weight sync) runs on the loop before the stop ends.
    Closed on the loop's own thread (the server generating on its loop, the call pattern before), the same
    call waited for the whole stop."""
    import asyncio
    import concurrent.futures
    import time

    config, tool_config = torch_config(tmp_path, all_ranks=True)
    profiler = build_rollout_dist_profiler(0, 1, config=config, tool_config=tool_config)
    generating = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    seen = {}

    async def server():
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(generating, lambda: profiler.start(profile_step=1))
        await loop.run_in_executor(generating, generate_ops, 60_000)  # a capture whose stop takes a while
        profiler.stop(executor=generating)  # stop_profile: answers
        closing = profiler._closing
        await asyncio.sleep(0.02)  # the trainer's next call arrives while the capture stops
        seen["answered while stopping"] = not closing.done()
        seen["answered_at"] = time.perf_counter()
        await asyncio.wrap_future(closing)
        seen["closed_at"] = time.perf_counter()

    asyncio.run(server())
    profiler.finalize()
    generating.shutdown()
    assert seen["answered while stopping"] and seen["answered_at"] < seen["closed_at"], seen
    records = list(read_records(tmp_path.glob("*/manifest/*.jsonl")))
    [trace] = [r for r in records if r["type"] == "artifact"]
    assert (trace["step"], trace["state"], trace["stop_path"]) == (1, "written", "nogil")
    assert not [r for r in records if r["type"] in ("error", "skip")]


@pytest.mark.timing
def test_the_end_of_the_run_waits_for_a_close_handed_to_the_generating_thread(tmp_path):
    """The run ends (verl's watcher thread finalizes the replica) while the close handed to the server's
    thread has not run yet: the end waits for it, so the capture is stopped on its own thread and written,
    never stopped from the watcher's (which Kineto refuses: the capture would be given up)."""
    import asyncio
    import concurrent.futures
    import threading

    config, tool_config = torch_config(tmp_path, all_ranks=True)
    profiler = build_rollout_dist_profiler(0, 1, config=config, tool_config=tool_config)
    generating = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    busy = threading.Event()

    async def server():
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(generating, lambda: profiler.start(profile_step=1))
        await loop.run_in_executor(generating, generate_ops, 100)
        generating.submit(busy.wait, 10)  # the thread is still busy: the close waits behind it
        profiler.stop(executor=generating)

    asyncio.run(server())
    ended = threading.Thread(target=profiler.finalize)  # the watcher thread
    ended.start()
    ended.join(0.3)
    assert ended.is_alive()  # waiting for the close
    busy.set()
    ended.join(30)
    generating.shutdown()
    records = list(read_records(tmp_path.glob("*/manifest/*.jsonl")))
    assert [(r["step"], r["state"]) for r in records if r["type"] == "artifact"] == [(1, "written")]
    assert not [r for r in records if r["type"] == "error"]
    [wait] = [r for r in records if r["type"] == "profiling_wait"]
    assert "the end of the run" in wait["reason"]


@pytest.mark.timing
def test_a_start_that_runs_the_pending_close_itself_keeps_its_own_step_open(tmp_path):
    """The next start_profile came while the last close waited out its grace: it runs that close first and
    opens its step; the close it cancelled must not close again (it would end the new step's capture)."""
    import asyncio

    config, tool_config = torch_config(tmp_path, all_ranks=True)
    profiler = build_rollout_dist_profiler(0, 1, config=config, tool_config=tool_config)
    open_steps = []

    async def server():
        profiler.start(profile_step=1)
        profiler.stop()
        await asyncio.sleep(0)  # the close is waiting out its grace
        profiler.start(profile_step=2)  # runs it now, cancels the waiting task
        await asyncio.sleep(0.05)  # the cancelled task wakes up
        open_steps.append(profiler._prof.current_step)
        profiler.stop()
        await asyncio.sleep(0.05)

    asyncio.run(server())
    profiler.finalize()
    assert open_steps == [2]
    records = list(read_records(tmp_path.glob("*/manifest/*.jsonl")))
    assert sorted(r["step"] for r in records if r["type"] == "artifact" and r.get("state") == "written") == [1, 2]
    assert not [r for r in records if r["type"] == "error"]


# ------------------------------------------------------------------------ the trainer's unprofiled steps


@pytest.mark.timing
def test_the_trainers_unprofiled_steps_are_timed_in_the_driver_and_reported_beside_the_profiled_ones(tmp_path):
    # verl's workers hear of profiled steps only; the driver's trainer calls _start_profiling/_stop_profiling
    # every step. Before, a drop-in run's report said "unprofiled steps: none recorded" (seen).
    import importlib.util
    import time

    from rlprof.analysis.report import build_reports, render
    from rlprof.integrations.verl import trainer_steps

    for module in trainer_steps.TRAINERS:  # verl's trainers (v0 and v1) call both every step
        source = importlib.util.find_spec(module).loader.get_source(module)
        assert "def _start_profiling(self" in source and "def _stop_profiling(self" in source

    config, tool_config = torch_config(tmp_path, all_ranks=True)
    worker = Worker(DistProfiler(0, config=config, tool_config=tool_config, save_file_prefix="actor"))
    profiled = [2]

    class RayPPOTrainer:  # verl 0.9.1's fit, as far as profiling goes
        def __init__(self):
            self.config = {"global_profiler": {"tool": "torch", "steps": profiled, "save_path": str(tmp_path)}}
            self.global_steps = 1

        def _start_profiling(self, do_profile):
            if do_profile:
                worker.profiler.start(profile_step=self.global_steps)

        def _stop_profiling(self, do_profile, run_command=False):
            if do_profile:
                worker.profiler.stop(run_command=run_command)

        def fit(self, steps):
            for _ in range(steps):
                profile = self.global_steps in profiled
                self._start_profiling(profile)
                worker.compute_log_prob()
                time.sleep(0.02)
                self._stop_profiling(profile, run_command=profile and self.global_steps == max(profiled))
                self.global_steps += 1

    trainer_steps.wrap(RayPPOTrainer)
    trainer_steps.wrap(RayPPOTrainer)  # once only
    RayPPOTrainer().fit(4)

    run_dir = tmp_path / f"dropin-{tmp_path.name}"
    records = [r for r in read_records([run_dir]) if r["type"] == "unprofiled_steps"]
    assert [r["steps"] for r in records] == [[1], [3], [4]] and {r["rank"] for r in records} == {None}
    (report,) = build_reports([run_dir])
    assert report.cost.unprofiled_count == 2 and report.cost.unprofiled_ms >= 20  # 3 and 4: step 1 is warm-up
    assert "unprofiled steps: median" in render(report)
    trainer_steps.unwrap(RayPPOTrainer)
    assert not getattr(RayPPOTrainer._start_profiling, "rlprof_wrapped", False)
