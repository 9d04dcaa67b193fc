"""precision_debugger through the verl drop-in: the module verl's worker holds for each role reaches the
backend as the region's model; every rank of an enabled role is selected (``ranks: []`` included) and the
"collects nothing" warning is not said for it; a worker without the model never raises into training.

The workers here have the shape of verl 0.9.1's (``verl/workers/engine_workers.py``): an
``ActorRolloutRefWorker`` holding ``self.actor``/``self.ref`` TrainingWorkers, each with ``.engine.module``,
and a critic ``TrainingWorker`` with ``self.engine.module``; their methods carry verl's annotations.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("msprobe")
pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from msprobe_workload import run, shared_config, tiny_model  # noqa: E402
from verl.utils.profiler.config import PrecisionDebuggerToolConfig, ProfilerConfig, TorchProfilerToolConfig  # noqa: E402

from rlprof import notices  # noqa: E402
from rlprof.manifest import read_records  # noqa: E402
from rlprof.verl import DistProfiler  # noqa: E402


@pytest.fixture(autouse=True)
def one_run(monkeypatch, tmp_path):
    monkeypatch.setenv("RLPROF_RUN_ID", f"msprobe-verl-{tmp_path.name}")
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def training_worker(model):
    """verl's TrainingWorker as the drop-in sees it: the model is ``engine.module``."""
    return SimpleNamespace(engine=SimpleNamespace(module=model))


class ActorRolloutRefWorker:
    def __init__(self, profiler, actor=None, ref=None):
        self.profiler = profiler
        if actor is not None:
            self.actor = training_worker(actor)
        if ref is not None:
            self.ref = training_worker(ref)

    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
    def compute_ref_log_prob(self):
        run(self.ref.engine.module)

    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")
    def compute_log_prob(self):
        run(self.actor.engine.module)

    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self):
        run(self.actor.engine.module)
        return "updated"


class CriticWorker:
    def __init__(self, profiler, model):
        self.profiler = profiler
        self.engine = SimpleNamespace(module=model)

    @DistProfiler.annotate(color="red", role="critic_update")
    def update_critic(self):
        run(self.engine.module)


def precision(save_path, stages=None, **kwargs):
    tool_config = PrecisionDebuggerToolConfig(config_path=str(shared_config()), stages=stages)
    config = ProfilerConfig(tool="precision_debugger", enable=True, save_path=str(save_path),
                            tool_config=tool_config, **kwargs)
    return config, tool_config


def profiled_steps(worker, steps=(1, 2), calls=("compute_ref_log_prob", "compute_log_prob", "update_actor")):
    for step in steps:
        worker.profiler.start(profile_step=step)
        for call in calls:
            getattr(worker, call)()
        worker.profiler.stop(run_command=False)
    worker.profiler.finalize()


def records(save_path, kind):
    return [r for r in read_records([save_path]) if r.get("type") == kind]


def test_each_role_is_dumped_from_the_module_verls_worker_holds_for_it(tmp_path):
    config, tool_config = precision(tmp_path, all_ranks=True)
    actor, ref = tiny_model(), tiny_model()
    worker = ActorRolloutRefWorker(DistProfiler(rank=0, config=config, tool_config=tool_config,
                                                save_file_prefix="actor_rollout_ref"), actor=actor, ref=ref)
    profiled_steps(worker)
    dumps = sorted((r["step"], r["region"], r["rank"]) for r in records(tmp_path, "artifact") if r["kind"] == "msprobe_dump")
    assert dumps == [(s, region, 0) for s in (1, 2) for region in ("actor_compute_log_prob", "actor_update", "ref_compute_log_prob")]
    assert records(tmp_path, "skip") == [] and records(tmp_path, "error") == []


def test_stages_pick_the_dumped_regions_and_the_others_say_why(tmp_path):
    config, tool_config = precision(tmp_path, stages=["actor_update"], all_ranks=True)
    worker = ActorRolloutRefWorker(DistProfiler(rank=0, config=config, tool_config=tool_config,
                                                save_file_prefix="actor_rollout_ref"), actor=tiny_model(), ref=tiny_model())
    profiled_steps(worker)
    dumps = [(r["step"], r["region"]) for r in records(tmp_path, "artifact") if r["kind"] == "msprobe_dump"]
    assert sorted(dumps) == [(1, "actor_update"), (2, "actor_update")]
    assert {s["region"] for s in records(tmp_path, "skip")} == {"actor_compute_log_prob", "ref_compute_log_prob"}


def test_a_critic_training_worker_names_its_own_engine_module(tmp_path):
    config, tool_config = precision(tmp_path, all_ranks=True)
    worker = CriticWorker(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="value_model"),
                          tiny_model())
    profiled_steps(worker, steps=(1,), calls=("update_critic",))
    assert [(r["region"], r["roles"]) for r in records(tmp_path, "artifact") if r["kind"] == "msprobe_dump"] == [
        ("critic_update", ["critic"])]


def test_megatron_model_chunks_dump_the_first_chunk_with_one_warning(tmp_path, caplog):
    notices.forget()
    config, tool_config = precision(tmp_path, stages=["actor_update"], all_ranks=True)

    class MegatronWorker(ActorRolloutRefWorker):
        @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
        def update_actor(self):
            for chunk in self.actor.engine.module:
                run(chunk)

    worker = MegatronWorker(DistProfiler(rank=0, config=config, tool_config=tool_config,
                                         save_file_prefix="actor_rollout_ref"))
    worker.actor = training_worker([tiny_model(), tiny_model()])  # Megatron's engine.module: model chunks
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        profiled_steps(worker, calls=("update_actor",))
    said = [r.getMessage() for r in caplog.records if "model chunks" in r.getMessage()]
    assert len(said) == 1 and "holds 2 model chunks" in said[0]
    dumps = [r["step"] for r in records(tmp_path, "artifact") if r["kind"] == "msprobe_dump"]
    assert dumps == [1, 2]


def test_a_worker_without_the_model_skips_naming_the_stage_and_training_goes_on(tmp_path):
    config, tool_config = precision(tmp_path, stages=["actor_update"], all_ranks=True)

    class Broken(ActorRolloutRefWorker):
        @property
        def actor(self):
            raise RuntimeError("engine not built yet")

    worker = Broken(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref"))
    worker.profiler.start(profile_step=1)
    with pytest.raises(RuntimeError, match="engine not built yet"):  # the method's own access raises, as it would unprofiled
        worker.update_actor()
    worker.profiler.stop(run_command=False)
    worker.profiler.finalize()
    [skip] = records(tmp_path, "skip")
    assert skip["region"] == "actor_update" and "no model for stage actor_update" in skip["reason"]
    assert records(tmp_path, "error") == []


def test_the_model_is_not_looked_up_for_a_backend_that_does_not_read_it(tmp_path):
    tool_config = TorchProfilerToolConfig(contents=["cpu"])
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(tmp_path), tool_config=tool_config)
    looked_up = []

    class Counting(ActorRolloutRefWorker):
        @property
        def actor(self):
            looked_up.append("actor")
            return training_worker(self._model)

    worker = Counting(DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref"))
    worker._model = tiny_model()
    worker.profiler.start(profile_step=1)
    assert worker.update_actor() == "updated"
    worker.profiler.stop(run_command=False)
    worker.profiler.finalize()
    assert looked_up == ["actor"]  # the method's own access only
    assert [r["region"] for r in records(tmp_path, "region")] == ["actor_update"]


def test_empty_ranks_select_every_rank_for_precision_debugger_and_say_no_collects_nothing(tmp_path, caplog):
    notices.forget()
    config, tool_config = precision(tmp_path, stages=["actor_update"], ranks=[])  # verl's precision guide writes this
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        workers = [ActorRolloutRefWorker(DistProfiler(rank=r, config=config, tool_config=tool_config, world_size=2,
                                                      save_file_prefix="actor_rollout_ref"), actor=tiny_model())
                   for r in range(2)]
    assert all(w.profiler.check_this_rank() for w in workers)
    assert not [r for r in caplog.records if "ranks is []" in r.getMessage()]
    for worker in workers:
        profiled_steps(worker, steps=(1,), calls=("update_actor",))
    dumps = sorted((r["rank"], r["region"]) for r in records(tmp_path, "artifact") if r["kind"] == "msprobe_dump")
    assert dumps == [(0, "actor_update"), (1, "actor_update")]
