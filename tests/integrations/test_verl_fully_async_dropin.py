"""The drop-in's side of verl's fully async trainer (rlprof.integrations.verl.fully_async), without a run.

verl's ``FullyAsyncTrainer`` is a Ray actor class (``@ray.remote``): what the drop-in patches must be the
class Ray's actor runs, or nothing of it happens in the run (the first try patched the actor handle's
class and the trainer recorded nothing). Its staleness and verl's own idle figures go to the trainer's
controller manifest under the version they describe. The whole run is tests/integrations/test_verl_fully_async.py.
"""

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

pytest.importorskip("verl.experimental.fully_async_policy.fully_async_trainer",
                    reason="verl 0.9.1's fully async policy is not installed (scripts/setup.sh installs it)")

from rlprof.integrations.verl import fully_async  # noqa: E402
from rlprof.manifest import read_records  # noqa: E402


def test_the_actor_ray_runs_is_the_patched_one():
    code = textwrap.dedent("""
        import verl
        from verl.experimental.fully_async_policy import fully_async_trainer as m
        from verl.experimental.fully_async_policy import fully_async_rollouter as r
        from verl.workers import engine_workers as w
        runs = m.FullyAsyncTrainer.__ray_metadata__.modified_class  # what Ray's actor process instantiates
        names = ("fit", "fit_step", "_get_samples_from_queue", "_collect_metrics_from_samples", "_fit_update_weights")
        generates = r.FullyAsyncRollouter.__ray_metadata__.modified_class
        held = ("_init_async_objects", "_start_profiling", "_stop_profiling", "reset_staleness")
        print(all(getattr(getattr(runs, n), "rlprof_wrapped", False) for n in names)
              and all(getattr(getattr(generates, n), "rlprof_wrapped", False) for n in held),
              getattr(w.ActorRolloutRefWorker.update_weights, "rlprof_wrapped", False))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "RLPROF_VERL": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ["True", "True"], proc.stdout[-2000:]


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPROF_RUN_ID", "fully-async-dropin")
    config = {"global_profiler": {"tool": "torch", "steps": [2, 3], "save_path": str(tmp_path)},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": False}}}}
    return SimpleNamespace(config=config, current_param_version=2)


def written(tmp_path, kind):
    return [r for r in read_records([tmp_path]) if r.get("type") == kind]


def test_staleness_is_the_versions_behind_the_trainers_weights_of_each_sample(trainer, tmp_path):
    """The trainer of step 3 holds version 2: samples of versions 2, 2, 1, 1 are 0, 0, 1, 1 behind."""
    fully_async._write_staleness(trainer, SimpleNamespace(meta_info={"trajectory_param_versions": [2, 2, 1, 1]}))
    [record] = written(tmp_path, "staleness")
    assert (record["step"], record["samples"], record["min"], record["mean"], record["max"]) == (3, 4, 0, 0.5, 1)
    assert record["rank"] is None


def test_verls_idle_figures_are_filed_under_the_version_they_describe(trainer, tmp_path):
    """The rollouter's is logged at the sync that made version N and describes its generation window (N);
    the trainer's is logged a version late and names its step (``training/global_step``)."""
    fully_async._write_idle(trainer, {fully_async.ROLLOUTER_IDLE: 0, "fully_async/rollouter/version_time": 1.5}, 3)
    fully_async._write_idle(trainer, {fully_async.TRAINER_IDLE: 0.25, "timing_s/step": 0.8, "training/global_step": 2}, 3)
    fully_async._write_idle(trainer, {fully_async.ROLLOUTER_IDLE: 0.5}, 0)  # the sync before training: no version
    found = sorted((r["step"], r["side"], r["idle_ratio"], r["window_s"]) for r in written(tmp_path, "framework_idle"))
    assert found == [(2, "trainer", 0.25, 0.8), (3, "rollouter", 0.0, 1.5)]


@pytest.mark.timing
def test_the_rollouter_held_at_the_limit_is_rollout_held_on_its_profiled_step(tmp_path, monkeypatch):
    """Its ``_resume_event`` waited on while clear is the hold (until ``reset_staleness`` sets it); a wait on
    the event set costs no region; the generation driver's tools capture nothing and say why."""
    import asyncio

    monkeypatch.setenv("RLPROF_RUN_ID", "fully-async-held")
    section = {"enable": True, "all_ranks": True, "tool": "torch", "save_path": str(tmp_path),  # verl copies these in
               "tool_config": {"torch": {"contents": ["cpu"]}}}
    rollouter = SimpleNamespace(config={"global_profiler": {"tool": "torch", "steps": [2], "save_path": str(tmp_path)},
                                        "actor_rollout_ref": {"rollout": {"profiler": section}}})
    driver = fully_async.driver_profiler(rollouter, "rollout")
    event = fully_async.HeldEvent(rollouter)

    async def run():
        driver.start(profile_step=2)
        event.set()
        await event.wait()  # not held
        event.clear()
        waiting = asyncio.ensure_future(event.wait())
        await asyncio.sleep(0.03)
        event.set()  # reset_staleness
        await waiting
        driver.stop(run_command=False)

    asyncio.run(run())
    driver.finalize()
    [held] = [r for r in read_records([tmp_path]) if r.get("type") == "region"]
    assert (held["region"], held["step"]) == ("rollout_held", 2) and held["end_ns"] - held["start_ns"] >= 0.015e9
    [skip] = written(tmp_path, "skip")
    assert "FullyAsyncRollouter" in skip["reason"] and not written(tmp_path, "artifact")


def test_a_capture_asked_mid_run_is_decided_before_the_sync_that_starts_its_version(tmp_path, monkeypatch):
    """Issue 48: ``rlprof capture`` on the fully async trainer. Its decider is asked at each sync about the version
    that sync starts (verl starts the replicas' profiling of that version there), never about a planned one; a version
    it grants joins verl's ``global_profiler.steps``, which verl reads at that sync and in the version's ``fit_step``,
    so the trainer's workers and the replicas capture it. The request waits for the first unplanned version."""
    from omegaconf import OmegaConf

    from rlprof.runtime.capture_requests import answer, request
    from rlprof.integrations.verl import step_metrics, trainer_steps

    monkeypatch.setenv("RLPROF_RUN_ID", "fully-async-capture")
    monkeypatch.setattr(step_metrics.TrainerMetrics, "open", classmethod(lambda cls, *a: None))  # no Ray here
    config = OmegaConf.create({"global_profiler": {"tool": "torch", "steps": [2], "save_path": str(tmp_path)},
                               "actor_rollout_ref": {"actor": {"profiler": {"enable": True}}}})
    trainer = SimpleNamespace(config=config, current_param_version=1)
    timer = trainer_steps.StepTimer.of(trainer)
    asked = request(timer.decider.root)  # asked during version 1
    fully_async._decide_next(trainer, 2)  # the sync that ends version 1 starts version 2: planned, nothing asked
    assert answer(timer.decider.root, asked, 0) is None
    fully_async._decide_next(trainer, 3)  # the sync that ends version 2: the first version the request can have
    assert answer(timer.decider.root, asked, 0)["steps"] == [3]
    assert list(config.global_profiler.steps) == [2, 3] and fully_async._profiled(trainer, 3)
    fully_async._decide_next(trainer, 4)
    assert list(config.global_profiler.steps) == [2, 3]  # one version asked, one captured
