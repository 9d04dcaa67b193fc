"""Real verl workers (from the verl 0.9.1 wheel) profiled by rlprof, driven through verl's own
dispatch: ``RayWorkerGroup.start_profile`` → an annotated method → ``stop_profile`` on a local Ray.

The switch is the documented one: the driver calls ``rlprof.verl.install()`` before Ray starts; the
workers get rlprof's classes through verl's ``verl.plugins`` entry point (they never call install).
The profiler section is verl's own default (``_generated_ppo_trainer.yaml``) with the tool set.
"""

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlprof.manifest import read_records

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")
pytest.importorskip("verl.single_controller.ray", reason="verl's Ray dispatch needs its CPU dependencies (see scripts/setup.sh)")

HERE = Path(__file__).parent

DRIVER = """
import json, os, sys
import rlprof.verl
rlprof.verl.install()                      # the switch, before Ray starts: workers inherit RLPROF_VERL=1

import ray
from omegaconf import OmegaConf
from importlib.resources import files
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl_profiled_worker import ProfiledWorker

trainer = OmegaConf.load(str(files("verl") / "trainer/config/_generated_ppo_trainer.yaml"))
trainer.global_profiler.tool = "torch"
trainer.global_profiler.save_path = sys.argv[1]
trainer.global_profiler.finish_hook_cmd = 'echo "$VERL_PROFILE_RANK $RLPROF_RUN_ID" > "$VERL_PROFILE_SAVE_PATH/hook-$VERL_PROFILE_RANK"'
section = trainer.actor_rollout_ref.actor.profiler
section.enable = True
section.all_ranks = True
section.tool_config.torch.discrete = sys.argv[2] == "discrete"
section = OmegaConf.to_container(section, resolve=True)

ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
wg = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(ProfiledWorker), profiler_section=section))
for step in (1, 2):
    wg.start_profile(role="train", profile_step=step)
    classes = wg.update_actor(3)
    wg.stop_profile(run_command=step == 2)
print(json.dumps({"classes": classes}))
ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["e2e", "discrete"])
def test_verl_worker_group_profiles_the_annotated_region(tmp_path, mode):
    save = tmp_path / "profile"
    env = {**__import__("os").environ, "PYTHONPATH": str(HERE), "RAY_DEDUP_LOGS": "0"}
    env.pop("RLPROF_RUN_ID", None)
    env.pop("RLPROF_VERL", None)
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(save), mode], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # verl's worker modules, imported in the workers, got rlprof's class through verl's plugin entry point
    assert result["classes"] == ["rlprof.integrations.verl.dist_profiler.DistProfiler"] * 2

    records = list(read_records([save]))
    assert len({r["run"] for r in records}) == 1, "one run directory for the whole training run"
    processes = [r for r in records if r["type"] == "process"]
    assert sorted(r["rank"] for r in processes) == [0, 1]
    assert all(sorted(r["roles"]) == ["actor", "ref", "rollout"] for r in processes)  # what the worker hosts
    artifacts = [r for r in records if r["type"] == "artifact" and r["backend"] == "torch"]
    assert sorted({(a["rank"], a["step"]) for a in artifacts}) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    if mode == "discrete":
        assert {a["region"] for a in artifacts} == {"actor_update"}
    run_dir = save / records[0]["run"]
    for artifact in artifacts:
        path = run_dir / artifact["path"]
        text = (gzip.open(path, "rt") if path.suffix == ".gz" else path.open()).read()
        assert "actor_update" in text, f"{path} holds no actor_update range"
    # the finish hook ran once per rank after the last step, with verl's variables and the shared run id
    hooks = sorted(p.name for p in save.glob("hook-*"))
    assert hooks == ["hook-0", "hook-1"]
    assert {(save / h).read_text().split()[1] for h in hooks} == {records[0]["run"]}


COLOCATED_DRIVER = """import json, sys
import rlprof.verl
rlprof.verl.install()
import ray
from omegaconf import OmegaConf
from importlib.resources import files
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup, create_colocated_worker_cls
from verl_profiled_worker import ProfiledWorker, ProfiledCritic

trainer = OmegaConf.load(str(files("verl") / "trainer/config/_generated_ppo_trainer.yaml"))
trainer.global_profiler.tool = "torch"
trainer.global_profiler.save_path = sys.argv[1]
sections = {}
for name, node in (("actor", trainer.actor_rollout_ref.actor.profiler), ("critic", trainer.critic.profiler)):
    node.enable = True
    node.all_ranks = True
    sections[name] = OmegaConf.to_container(node, resolve=True)
ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
cls = create_colocated_worker_cls({
    "actor_rollout": RayClassWithInitArgs(cls=ray.remote(ProfiledWorker), profiler_section=sections["actor"]),
    "critic": RayClassWithInitArgs(cls=ray.remote(ProfiledCritic), profiler_section=sections["critic"]),
})
wg_dict = RayWorkerGroup(pool, cls)
wgs = wg_dict.spawn(prefix_set=["actor_rollout", "critic"])
actor, critic = wgs["actor_rollout"], wgs["critic"]
for step in (1, 2):
    for wg in (actor, critic):
        wg.start_profile(role="train", profile_step=step)
    actor.update_actor(2)
    critic.train_batch(4)
    for wg in (actor, critic):
        wg.stop_profile(run_command=step == 2)
print("OK")
ray.shutdown()
"""


@pytest.mark.slow
def test_colocated_actor_and_critic_share_one_capture(tmp_path):
    """verl's create_colocated_worker_cls puts the actor and the critic in one process: their
    profilers join one session, one torch capture per step holds both stages' ranges."""
    save = tmp_path / "profile"
    env = {**__import__("os").environ, "PYTHONPATH": str(HERE)}
    env.pop("RLPROF_RUN_ID", None)
    env.pop("RLPROF_VERL", None)
    proc = subprocess.run([sys.executable, "-c", COLOCATED_DRIVER, str(save)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "OK"
    records = list(read_records([save]))
    processes = sorted((r["rank"], tuple(r["roles"])) for r in records if r["type"] == "process")
    assert processes == [(0, ("actor", "rollout", "ref")), (0, ("critic",)), (1, ("actor", "rollout", "ref")), (1, ("critic",))]
    artifacts = [r for r in records if r["type"] == "artifact" and r["backend"] == "torch"]
    assert sorted((a["rank"], a["step"]) for a in artifacts) == [(0, 1), (0, 2), (1, 1), (1, 2)]  # one per step and rank
    run_dir = save / records[0]["run"]
    for artifact in artifacts:
        text = gzip.open(run_dir / artifact["path"], "rt").read()
        assert "actor_update" in text and "critic_train_batch" in text
