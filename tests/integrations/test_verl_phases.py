"""verl's trainer's own phases (``timing_s/*``) recorded on every step of a profiled run: for "(outside regions)",
and for which phases profiling made longer.

A stand-in for ``verl.trainer.ppo.v1.trainer_base`` with verl 0.9.1's shape: a module-level
``marked_timer(name, timing_raw)`` context manager and ``PPOTrainer.fit`` stepping ``global_steps``
with ``config.global_profiler``. The real module runs in tests/integrations/test_verl_trainer.py."""

import contextlib
import time
import types

import pytest

from rlprof.manifest import read_records

omegaconf = pytest.importorskip("omegaconf")


def verl_like_trainer_module():
    module = types.ModuleType("verl.trainer.ppo.v1.trainer_base")

    @contextlib.contextmanager
    def marked_timer(name, timing_raw, color=None):
        start = time.perf_counter()
        yield
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start

    class PPOTrainer:
        def __init__(self, config):
            self.config, self.global_steps, self.timings = config, 1, []

        def fit(self):
            for _ in range(3):
                timing_raw = {}
                with module.marked_timer("step", timing_raw):
                    with module.marked_timer("gen", timing_raw, color="red"):
                        time.sleep(0.002)
                    with module.marked_timer("adv", timing_raw, color="brown"):
                        time.sleep(0.001)
                self.timings.append(timing_raw)
                self.global_steps += 1

    module.marked_timer, module.PPOTrainer = marked_timer, PPOTrainer
    return module


def test_every_steps_phases_are_written_beside_the_run_and_verls_timing_is_unchanged(tmp_path, monkeypatch):
    from rlprof.integrations.verl import phases

    monkeypatch.setenv("RLPROF_RUN_ID", "phases-run")
    module = verl_like_trainer_module()
    phases.patch(module)
    phases.patch(module)  # idempotent
    config = omegaconf.OmegaConf.create({"global_profiler": {"tool": "nsys", "steps": [1, 3], "save_path": str(tmp_path)}})
    trainer = module.PPOTrainer(config)
    trainer.fit()
    assert [sorted(t) for t in trainer.timings] == [["adv", "gen", "step"]] * 3  # verl's timing_s as before
    records = [r for r in read_records([tmp_path]) if r["type"] == "phase"]
    # every step of the run, the unprofiled step 2 too: its phases are what the profiled ones are held against
    assert sorted((r["step"], r["name"]) for r in records) == [(s, n) for s in (1, 2, 3) for n in ("adv", "gen", "step")]
    assert all(r["_manifest"].startswith(str(tmp_path / "phases-run" / "manifest" / "driver-")) for r in records)
    assert all(r["source"] == "verl timing_s" and r["end_ns"] > r["start_ns"] and r["rank"] is None for r in records)
    assert phases.DRIVER.trainer is None  # fit returned: nothing is recorded any more
    phases.unpatch(module)
    assert not hasattr(module.marked_timer, "_rlprof_original") and not hasattr(module.PPOTrainer.fit, "_rlprof_original")


def test_without_profiling_or_a_shared_run_id_nothing_is_written(tmp_path, monkeypatch):
    from rlprof.integrations.verl import phases

    module = verl_like_trainer_module()
    phases.patch(module)
    monkeypatch.setenv("RLPROF_RUN_ID", "phases-off")
    off = omegaconf.OmegaConf.create({"global_profiler": {"tool": None, "steps": [1], "save_path": str(tmp_path)}})
    module.PPOTrainer(off).fit()
    none = omegaconf.OmegaConf.create({"global_profiler": {"tool": "torch", "steps": [], "save_path": str(tmp_path)}})
    module.PPOTrainer(none).fit()  # a tool, but no step profiled
    monkeypatch.delenv("RLPROF_RUN_ID")
    on = omegaconf.OmegaConf.create({"global_profiler": {"tool": "torch", "steps": [1], "save_path": str(tmp_path)}})
    module.PPOTrainer(on).fit()  # outside Ray with no RLPROF_RUN_ID: the workers' run is unknown
    assert not list(tmp_path.rglob("*.jsonl"))
