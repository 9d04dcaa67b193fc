"""rlprof's own ``global_profiler`` keys reach every verl worker and rollout replica from the trainer's config,
and the driver's closing line says where the profile went (issue 40).

verl hands a worker its role's profiler section only, into which its config interpolates the global keys verl
knows; ``+global_profiler.capture_budget_mb=1`` on verl's command line reached no worker, and every step was
captured at full size without a word. Here verl 0.9.1's real V1 trainer class is built from verl's own composed
config (its ``__init__`` runs where verl's TaskRunner builds it, before any worker), then the workers' profilers
are built as verl's workers build them. Ray's key-value store, through which the keys travel, is a stand-in
(``kv_stand_in.StandInKV``, a dict with the three calls rlprof makes); the real store carries them in
``tests/integrations/test_verl_trainer.py`` (verl's real trainer on a local Ray cluster).
"""

from __future__ import annotations

import shlex
import subprocess

import pytest
from omegaconf import OmegaConf

from rlprof.errors import ConfigError
from rlprof.manifest import read_records

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from rlprof.integrations.verl import global_keys, run_signals  # noqa: E402
from rlprof.verl import DistProfiler, build_rollout_dist_profiler  # noqa: E402

from kv_stand_in import StandInKV  # noqa: E402

A = "actor_rollout_ref.actor.profiler"
R = "actor_rollout_ref.rollout.profiler"


@pytest.fixture
def kv(monkeypatch, request):
    """This process as a process of a verl run inside Ray, with the stand-in store; the trainer classes
    hand the keys on (as ``rlprof.verl.install()`` arranges in every process) for the test only."""
    store = StandInKV()
    monkeypatch.setattr(run_signals, "_kv", lambda: store)
    monkeypatch.setenv("RLPROF_RUN_ID", f"keys-{request.node.name[:40]}")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    global_keys.watch()
    yield store
    global_keys.forget()


def trainer_config(verl_generated_config, save, *overrides):
    """verl 0.9.1's composed trainer config with ``overrides`` (what ``+key=value`` on its command line adds)."""
    cfg = OmegaConf.load(verl_generated_config)
    profile = ["global_profiler.tool=torch", "global_profiler.steps=[1,2,3]", f"global_profiler.save_path={save}",
               f"{A}.enable=true", f"{A}.all_ranks=true", f"{A}.tool_config.torch.contents=[cpu]",
               f"{R}.enable=true", f"{R}.all_ranks=true", "trainer.v1.trainer_mode=sync"]
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([*profile, *overrides]))
    OmegaConf.resolve(cfg)  # as verl's TaskRunner does before it builds the trainer
    return cfg


def build_trainer(cfg):
    """verl's own V1 sync trainer, built as its TaskRunner builds it (``__init__`` only: no worker yet)."""
    from verl.trainer.ppo.v1 import get_trainer_cls

    return get_trainer_cls("sync")(config=cfg)


def worker_profiler(cfg, kind):
    """The profiler a verl worker builds from its role section (``omega_conf_to_dataclass``, the tool's own
    dataclass), or a rollout replica's server from the rollout's section."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import ProfilerConfig

    section = cfg.actor_rollout_ref.actor.profiler if kind == "worker" else cfg.actor_rollout_ref.rollout.profiler
    config = omega_conf_to_dataclass(section, dataclass_type=ProfilerConfig)
    tool_config = omega_conf_to_dataclass(section.tool_config.torch)
    if kind == "worker":
        return DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref")
    return build_rollout_dist_profiler(0, 1, config=config, tool_config=tool_config)


@pytest.mark.parametrize("kind", ["worker", "replica"])
def test_a_budget_set_on_verls_command_line_holds_in_every_worker_and_replica(kv, verl_generated_config, tmp_path, kind):
    import torch

    save = tmp_path / "profile"
    # 1 KB: the first capture is over it whatever it holds
    cfg = trainer_config(verl_generated_config, save, "global_profiler.capture_budget_mb=0.001",
                         "global_profiler.run_budget_gb=7")
    build_trainer(cfg)
    profiler = worker_profiler(cfg, kind)
    g = profiler.profiler.config.global_
    assert (g.capture_budget_mb, g.run_budget_gb) == (0.001, 7.0)  # before the fix: the defaults, 2048 and 50
    assert profiler.profiler.config.capture_budget_given
    try:
        for step in (1, 2, 3):
            if kind == "worker":  # verl's trainer, then an annotated stage of the actor
                profiler.start(profile_step=step)
                with profiler.profiler.unsampled_role("actor", "update"):
                    torch.ones(64, 64).matmul(torch.ones(64, 64))
                profiler.stop(run_command=False)
            else:  # verl's LLMServerManager: no step; the replica's generate call is its region
                profiler.start()
                torch.ones(64, 64).matmul(torch.ones(64, 64))
                profiler.stop()
    finally:
        profiler.finalize()
    records = list(read_records([save]))
    captured = sorted({s for r in records if r["type"] == "artifact" for s in r.get("steps") or ()})
    skipped = sorted(s for r in records if r["type"] == "skip" for s in r.get("steps") or ())
    reasons = {r["reason"] for r in records if r["type"] == "skip"}
    assert (captured, skipped) == ([1], [2, 3]), (captured, skipped)
    assert all("over global_profiler.capture_budget_mb" in reason for reason in reasons), reasons


def test_global_discrete_set_on_verls_command_line_makes_each_workers_roles_discrete(kv, verl_generated_config, tmp_path):
    """``global_profiler.discrete`` (verl's nsight guide writes it; rlprof reads it for roles that say nothing) reaches
    the worker, and the ``discrete: false`` of the tool section verl generated is verl's default, not a choice that
    outvotes it, as ``rlprof check`` reads the same config."""
    cfg = trainer_config(verl_generated_config, tmp_path, "global_profiler.discrete=true")
    build_trainer(cfg)
    profiler = worker_profiler(cfg, "worker")
    try:
        assert profiler.is_discrete_mode()
    finally:
        profiler.finalize()


def test_the_keys_are_handed_on_before_any_worker_and_always_written(kv, verl_generated_config, tmp_path):
    cfg = trainer_config(verl_generated_config, tmp_path, "global_profiler.capture_budget_mb=1")
    build_trainer(cfg)
    assert global_keys.received() == {"capture_budget_mb": 1}
    build_trainer(trainer_config(verl_generated_config, tmp_path))  # a run that sets none overwrites what was there
    assert global_keys.received() == {}


@pytest.mark.parametrize("override, key, said", [
    ("global_profiler.capture_budget_mb=lots", "global_profiler.capture_budget_mb", "got 'lots'"),
    ("global_profiler.run_budget_gb=-1", "global_profiler.run_budget_gb", "got -1"),
    ("global_profiler.gather=traces", "global_profiler.gather", "nothing gathers there"),
])
def test_a_key_no_worker_could_honour_refuses_the_run_before_any_worker(kv, verl_generated_config, tmp_path,
                                                                        override, key, said):
    with pytest.raises(ConfigError) as refused:
        build_trainer(trainer_config(verl_generated_config, tmp_path, override))
    assert refused.value.named_key() == key and said in str(refused.value), str(refused.value)
    assert kv.data == {}  # nothing handed on


def test_keys_set_where_they_cannot_reach_the_workers_refuse_the_run(verl_generated_config, tmp_path, monkeypatch):
    monkeypatch.setattr(run_signals, "_kv", lambda: None)  # the trainer's process is not connected to Ray
    monkeypatch.setenv("RLPROF_RUN_ID", "keys-not-in-ray")
    global_keys.watch()
    try:
        with pytest.raises(ConfigError) as refused:
            build_trainer(trainer_config(verl_generated_config, tmp_path, "global_profiler.capture_budget_mb=1"))
        assert refused.value.named_key() == "global_profiler.capture_budget_mb"
        assert "cannot hand it to verl's workers" in str(refused.value)
        build_trainer(trainer_config(verl_generated_config, tmp_path))  # none set: nothing to hand on, no refusal
    finally:
        global_keys.forget()


def test_every_key_not_carried_is_one_verl_hands_on_itself(verl_generated_config):
    """The keys are derived from rlprof's declaration (:class:`GlobalConfig`): every key it declares is
    carried, but those verl's own config defines and acts on — those it mirrors into each role's section,
    and those its trainer acts on itself. A key rlprof adds later is carried with no list to update."""
    from rlprof.config.fields import VERL_MARKER, keys_of, mirrored_keys
    from rlprof.config.sections import GlobalConfig

    verl = OmegaConf.load(verl_generated_config)
    verls_global = set(verl.global_profiler)
    role = set(verl.actor_rollout_ref.actor.profiler)
    declared = keys_of(GlobalConfig) - {VERL_MARKER}
    not_carried = declared - global_keys.carried_keys()
    assert not_carried <= verls_global  # only verl's own keys
    assert {k for k in not_carried if k in role} == set(mirrored_keys(GlobalConfig))  # verl mirrors these
    assert not_carried - role == set(global_keys.TRAINER_ACTS_ON)  # its trainer acts on these
    assert {"capture_budget_mb", "run_budget_gb", "discrete"} <= global_keys.carried_keys()


# ------------------------------------------------------------------------ the driver's closing line


def test_the_closing_line_says_where_how_many_finalized_and_how_to_read_it(kv, tmp_path, capsys):
    save = tmp_path / "profile"
    section = {"tool": "torch", "enable": True, "all_ranks": True, "save_path": str(save)}
    profiler = DistProfiler(rank=0, config=section, tool_config={"contents": ["cpu"]}, save_file_prefix="actor")
    profiler.start(profile_step=1)
    profiler.stop(run_command=True)  # the trainer's last profiled step: this process finalizes
    run_id = profiler.profiler.run.run_id
    kv.data[(run_signals.NAMESPACE, f"{run_id}/process/elsewhere-1")] = b"open"  # a process that died
    assert run_signals.finish_run([run_id], timeout_s=0.2) == ["elsewhere-1"]
    (line,) = run_signals.closing_lines(run_signals.run_ends([run_id]))
    # a process finalized by its own exit handler (SIGTERM) never tells the store: its manifest says it
    kv.data[(run_signals.NAMESPACE, run_signals.process_key(run_id))] = b"open"
    assert run_signals.closing_lines(run_signals.run_ends([run_id])) == [line]
    run_dir = save / run_id
    assert line.startswith(f"rlprof: the profile of this verl run is in {run_dir} (1 of 2 profiling processes finalized; "
                           f"not: elsewhere-1); read it: "), line
    command = line.split("; read it: ", 1)[1]
    assert command.endswith(f" report {run_dir}")
    report = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=tmp_path)  # runs as pasted
    assert f"run {run_id}:" in report.stdout, report.stdout[-2000:] + report.stderr[-2000:]
    assert shlex.split(command)[-2:] == ["report", str(run_dir)]


def test_a_run_where_no_process_profiled_says_so_and_none_outside_ray(kv):
    assert run_signals.closing_lines(run_signals.run_ends(["nobody"])) == [
        "rlprof: no process of this verl run profiled (global_profiler.tool and steps, and a role's profiler.enable "
        "with its ranks, select what is profiled)"]
    assert run_signals.closing_lines(None) == []  # Ray's store not reachable: nothing known, nothing said
