"""The schema declares each key once (:mod:`rlprof.config.sections`): the key sets, the reading, the
defaults and the key reference in docs/configuration.md all come from those declarations."""

from dataclasses import fields
from pathlib import Path

import pytest

from rlprof import ConfigError, load_config
from rlprof.config import CORE_TOOL_KEYS, GLOBAL_KEYS, ROLE_KEYS, GlobalConfig, RoleConfig
from rlprof.config.fields import declared, default_of
from rlprof.config.sections import key_reference

DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
ON = ["global_profiler.tool=torch", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
      "actor_rollout_ref.actor.profiler.all_ranks=true"]


VERL_GLOBAL_KEYS = {"tool", "steps", "save_path", "profile_continuous_steps", "discrete", "global_tool_config",
                    "relocate_results", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks", "_target_"}
VERL_ROLE_KEYS = {"enable", "all_ranks", "ranks", "tool_config", "schedule", "discrete", "_target_",
                  "tool", "save_path", "relocate_results", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks"}


def test_the_key_sets_are_verls():
    """verl's keys are all understood, and every other key is rlprof's own (``gather*``, the budgets: verl has
    no equivalent), declared and documented once (the key sets come from the declarations, never a list)."""
    assert VERL_GLOBAL_KEYS <= GLOBAL_KEYS and VERL_ROLE_KEYS <= ROLE_KEYS
    own = {name for f, name in declared(GlobalConfig)} - VERL_GLOBAL_KEYS
    assert {"gather", "gather_budget_gb", "gather_delete_local", "capture_budget_mb", "run_budget_gb"} <= own
    assert all(f"`global_profiler.{name}`" in key_reference() for name in own)
    assert ROLE_KEYS - VERL_ROLE_KEYS <= GLOBAL_KEYS  # a role carries no key of its own beyond verl's but the mirrored ones


def test_a_key_declared_recorded_is_in_every_process_record_and_the_reference():
    """``key(..., recorded=True)``: its value is what the process record's ``global_profiler`` holds (as plain
    JSON), and the reference says it is recorded; nothing else names it."""
    from dataclasses import dataclass

    from rlprof.config.fields import key, recorded_values, reference
    from rlprof.config.schedule import Schedule, parse_schedule
    from rlprof.config.values import parse_steps

    @dataclass(frozen=True)
    class Section:
        steps: tuple[int, ...] | None = key(parse_steps, doc="Steps.", recorded=True)
        window: Schedule | None = key(parse_schedule, doc="A schedule.", recorded=True)
        quiet: int = key(int, default=0, doc="Not recorded.")

    section = Section(steps=(1, 2), window=parse_schedule({"active": 2}, "s.window"))
    assert recorded_values(section) == {"steps": [1, 2], "window": {**vars(section.window)}}
    assert [("Recorded in every process's manifest." in row) for row in reference(Section, "s")] == [True, True, False]


@pytest.mark.parametrize("section", [GlobalConfig, RoleConfig])
def test_an_absent_key_reads_as_its_declared_default(section):
    """The dataclass default and what the key's reader makes of ``null`` are one value, documented."""
    for f, name in declared(section):
        assert f.metadata["reader"](None, f"section.{name}") == default_of(f), name
        assert f.metadata["doc"].strip(), f"{name} has no documentation"
    assert {f.name for f in fields(section)} - {f.name for f, _ in declared(section)} <= {
        "name", "key_path", "follows", "caller_steps"}


def test_docs_list_every_key_as_declared():
    text = DOCS.read_text()
    generated = text.split("<!-- keys: begin -->\n", 1)[1].split("<!-- keys: end -->", 1)[0]
    assert generated == key_reference(), "regenerate the table with rlprof.config.sections.key_reference()"


def test_a_role_section_that_is_not_a_mapping_names_the_keys_it_takes():
    with pytest.raises(ConfigError) as info:
        load_config({"critic": {"profiler": [1]}})
    assert str(info.value) == "critic.profiler: got [1] (list); allowed: a mapping of enable, all_ranks, ranks, ..."


def test_loaded_tool_sections_hold_no_core_keys():
    """The guarantee backends (and nsys' controller_nsight_options) rely on: no tool section of a
    loaded config carries the core's keys; they are resolved into the role instead."""
    cfg = load_config(None, ON + ["+global_profiler.global_tool_config.torch._target_=verl.x.TorchProfilerToolConfig",
                                  "+global_profiler.global_tool_config.torch.discrete=true",
                                  "+global_profiler.global_tool_config.torch.contents=[cpu]",
                                  "+global_profiler.global_tool_config.torch.schedule={active: 1}"])
    assert cfg.global_.global_tool_config == {"torch": {"contents": ["cpu"]}}
    actor = cfg.roles["actor"]
    assert actor.tool_config == {"torch": {"contents": ["cpu"]}}
    assert actor.discrete and actor.schedule is not None and actor.schedule.active == 1
    for section in [*cfg.global_.global_tool_config.values(), *(s for r in cfg.roles.values() for s in r.tool_config.values())]:
        assert not set(section) & set(CORE_TOOL_KEYS)


def test_a_section_verl_generated_does_not_count_as_settings():
    """verl's marker, not a copy of verl's defaults, tells its generated sections from the user's."""
    npu = {"contents": [], "level": "level0", "analysis": True, "discrete": False}
    marked = load_config({"global_profiler": {"tool": "torch", "steps": [1]},
                          "critic": {"profiler": {"enable": True, "all_ranks": True, "tool_config": {
                              "npu": {"_target_": "verl.utils.profiler.config.NPUToolConfig", **npu}}}}})
    assert marked.warnings == ()
    unmarked = load_config({"global_profiler": {"tool": "torch", "steps": [1]},
                            "critic": {"profiler": {"enable": True, "all_ranks": True, "tool_config": {"npu": npu}}}})
    assert unmarked.warnings == (
        "critic.profiler.tool_config.npu: sets level=level0, analysis=true but npu is not a selected tool "
        "(global_profiler.tool=[torch]): ignored; add npu to global_profiler.tool to use it",)


def test_one_boolean_reader_for_core_legacy_and_backends():
    import rlprof.config.legacy as legacy
    import rlprof.config.schema as schema
    npu_settings = pytest.importorskip("rlprof_npu.settings")
    from rlprof.tool_config import parse_bool

    assert schema.parse_bool is legacy.parse_bool is npu_settings.parse_bool is parse_bool
    with pytest.raises(ConfigError, match=r"^x\.y: got 1 \(int\); allowed: true or false$"):
        parse_bool(1, "x.y")
    assert parse_bool(None, "x.y", default=True) is True


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("gather", "all", "none or traces"),
    ("gather", 1, "none or traces"),
    ("gather_budget_gb", -1, "a size in GB"),
    ("gather_budget_gb", 0, "a size in GB"),
    ("gather_budget_gb", "10G", "a size in GB"),
    ("gather_budget_gb", True, "a size in GB"),
    ("gather_delete_local", "maybe", "true or false"),
])
def test_a_bad_gather_setting_names_the_key_the_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        load_config({"global_profiler": {"tool": "torch", "steps": [1], key: value}})
    assert f"global_profiler.{key}" in str(err.value) and repr(value) in str(err.value) and allowed in str(err.value)


@pytest.mark.parametrize("key", ["capture_budget_mb", "run_budget_gb"])
@pytest.mark.parametrize("value", [-1, "2G", True, float("inf")])
def test_a_bad_budget_names_the_key_the_value_and_what_is_allowed(key, value):
    with pytest.raises(ConfigError) as err:
        load_config({"global_profiler": {"tool": "torch", "steps": [1], key: value}})
    unit = "MB" if key.endswith("_mb") else "GB"
    assert f"global_profiler.{key}" in str(err.value) and f"a size in {unit}" in str(err.value)


def test_budgets_protect_a_disk_by_default_and_zero_means_no_limit():
    g = load_config({}).global_
    assert (g.capture_budget_mb, g.run_budget_gb) == (2048.0, 50.0)
    g = load_config({"global_profiler": {"capture_budget_mb": 0, "run_budget_gb": 0.5}}).global_
    assert (g.capture_budget_mb, g.run_budget_gb) == (0.0, 0.5)


def test_gather_defaults_leave_artifacts_on_their_node_with_a_budget():
    g = load_config({"global_profiler": {"gather": "TRACES", "gather_budget_gb": 0.5}}).global_
    assert (g.gather, g.gather_budget_gb, g.gather_delete_local) == ("traces", 0.5, False)
    g = load_config({}).global_
    assert (g.gather, g.gather_budget_gb, g.gather_delete_local) == ("none", 50.0, False)
    assert load_config({"global_profiler": {"gather_budget_gb": None}}).global_.gather_budget_gb == 50.0
