"""One way through the config (issue 31): the size check runs once per input, overrides on a loaded
config do not read it again, ``parse`` is pure, and only the legacy module knows the legacy keys."""

import ast
from pathlib import Path

import pytest

import rlprof.config.schema as schema
import rlprof.config.sources as sources
from rlprof import load_config
from rlprof.config import legacy
from rlprof.config.limits import check_tree

ON = {"global_profiler": {"tool": "torch", "steps": [1, 2]},
      "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [0]}}}}


@pytest.fixture
def checked(monkeypatch):
    """Every tree :func:`check_tree` walks during the test, by where it was asked for."""
    seen = []

    def counting(value, where):
        seen.append(where)
        return check_tree(value, where)

    monkeypatch.setattr(sources, "check_tree", counting)
    monkeypatch.setattr(schema, "check_tree", counting, raising=False)
    return seen


def test_each_input_is_size_checked_once(checked):
    cfg = load_config(ON, ["global_profiler.steps=[3]", "actor_rollout_ref.actor.profiler.ranks=[1]"])
    assert cfg.global_.steps == (3,) and cfg.roles["actor"].ranks == (1,)
    assert checked == ["", "global_profiler.steps", "actor_rollout_ref.actor.profiler.ranks"]


def test_overrides_on_a_loaded_config_check_only_the_overrides(checked):
    cfg = load_config(ON).with_overrides(caller_steps=True)
    checked.clear()
    again = load_config(cfg, ["global_profiler.steps=[4]"])
    assert checked == ["global_profiler.steps"]
    assert again.global_.steps == (4,) and again.global_.caller_steps and again.roles["actor"].ranks == (0,)
    assert load_config(cfg) is cfg


def test_parse_is_pure_it_is_given_the_installed_backends(monkeypatch):
    import rlprof.installed

    def no_discovery():
        raise AssertionError("parse looked up entry points")

    monkeypatch.setattr(rlprof.installed, "discover", no_discovery)
    raw = {"global_profiler": {"tool": "mine", "steps": [1], "global_tool_config": {"mine": {"x": 1}}}}
    assert schema.parse(raw, installed={"mine"}).global_.global_tool_config == {"mine": {"x": 1}}
    with pytest.raises(schema.ConfigError, match=r"global_tool_config.mine: unknown key; known keys in global_profiler.global_tool_config: npu, nsys, precision_debugger, torch, torch_memory$"):
        schema.parse(raw | {"global_profiler": {**raw["global_profiler"], "tool": "torch"}}, installed=())


def test_only_the_legacy_module_names_legacy_keys():
    """The loader selects legacy keys through :data:`rlprof.config.legacy.LEGACY_SELECTIONS`; no other
    config module spells one (a second list drifts from the migration that reads it)."""
    legacy_words = {"profile_steps", "npu_profile", "profile_ranks", "profile_ranks_all", "profile_discrete",
                    "actor_rollout_ref.profiler", "actor_rollout_ref.critic", "actor_rollout_ref.rm"}
    for path in Path(schema.__file__).parent.glob("*.py"):
        if path.name == "legacy.py":
            continue
        strings = {node.value for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        spelled = {s for s in strings for word in legacy_words if s == word or s.startswith(word + ".")
                   or s.endswith("." + word)}
        assert not spelled, f"{path.name} spells legacy keys {sorted(spelled)}: ask rlprof.config.legacy"
    assert set(legacy.LEGACY_SELECTIONS) >= {"trainer.profile_steps", "npu_profile", "actor_rollout_ref.critic"}


def test_a_ray_worker_reads_its_config_once(monkeypatch, tmp_path):
    """Issue 47: the config is read once per process, where it enters (``ProfiledWorker.rlprof_setup``), into a
    value everything after takes as read (the Profiler, its plan, its session); before, a worker on a node with
    its own save path read it twice."""
    from rlprof.integrations import ray_worker

    reads = []
    real = schema.read_config

    def counting(source, overrides, errors):
        if not isinstance(source, schema.ProfilerConfig) or overrides:
            reads.append(source)
        return real(source, overrides, errors)

    monkeypatch.setattr(schema, "read_config", counting)
    monkeypatch.setattr(ray_worker, "node_save_path", lambda: str(tmp_path / "node"))
    worker = ray_worker.ProfiledWorker()
    worker.rlprof_setup(ON, run_id="once", overrides=[f"global_profiler.save_path={tmp_path}"], rank=0, world_size=1,
                        roles=["actor"])
    try:
        assert len(reads) == 1 and worker.profiler.config.global_.save_path == str(tmp_path / "node")
    finally:
        worker.profiler.finalize()
