"""Hostile and malformed configuration input (issue 13, "Bad input"; issue 16, "Internals in errors").

Each case must end in a ConfigError whose message names the key path (or the input: file,
override), the bad value and what is allowed; never a traceback, a hang or a crash. Cases that
used to crash the interpreter run in a subprocess.
"""

import subprocess
import sys
import textwrap
import time

import pytest
from omegaconf import OmegaConf

from rlprof import ConfigError, load_config
from rlprof.config.limits import MAX_DEPTH, MAX_LIST, MAX_VALUES

ON = ["global_profiler.tool=torch", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true"]


def error_of(source=None, overrides=()):
    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    assert time.perf_counter() - started < 10, "rejecting bad input must be quick"
    return str(info.value)


# ----------------------------------------------------------------------------- keys and types


def test_non_string_keys_are_named_not_passed_to_difflib():
    msg = error_of(OmegaConf.create({"global_profiler": {1: 2}}))
    assert msg.startswith("global_profiler: got the key 1 (int); allowed: a string key (keys must be strings")
    # at the top level of a trainer config, a non-string key is someone else's business
    assert load_config(OmegaConf.create({0: "x", "global_profiler": {"tool": "torch"}})).global_.tools == ("torch",)
    # a dict says the same as a DictConfig (it used to be read as the unknown key '0'); more in test_config_keys.py
    assert error_of({"global_profiler": {0: "x"}}).startswith("global_profiler: got the key 0 (int); allowed: a string key")


@pytest.mark.parametrize("legacy, message", [
    ({"profile_ranks": "zero"}, "actor_rollout_ref.actor.profile_ranks: got 'zero' (str); allowed: a list of non-negative integer ranks"),
    ({"profile_ranks": {"a": 1}}, "actor_rollout_ref.actor.profile_ranks: got {'a': 1} (dict)"),
    ({"profile_ranks_all": "yes"}, "actor_rollout_ref.actor.profile_ranks_all: got 'yes' (str); allowed: true or false"),
    ({"profile_discrete": [1]}, "actor_rollout_ref.actor.profile_discrete: got [1] (list); allowed: true or false"),
    ({"profile_ranks": [0], "profiler": [1]}, "actor_rollout_ref.actor.profiler: got [1] (list); allowed: a mapping"),
])
def test_legacy_keys_of_the_wrong_type(legacy, message):
    assert message in error_of({"trainer": {"profile_steps": [1]}, "actor_rollout_ref": {"actor": legacy}})


def test_legacy_profile_ranks_as_one_int_or_a_comma_string():
    for value, ranks in ((1, (1,)), ("0,1", (0, 1)), (None, ())):
        cfg = load_config({"trainer": {"profile_steps": [1]}, "actor_rollout_ref": {"actor": {"profile_ranks": value}}})
        assert cfg.roles["actor"].ranks == ranks


@pytest.mark.parametrize("section, value, message", [
    ("actor_rollout_ref.critic", [1], "actor_rollout_ref.critic: got [1] (list); allowed: a mapping with profile_ranks"),
    ("npu_profile", [1], "npu_profile: got [1] (list); allowed: a mapping with an options mapping"),
    ("trainer.npu_profile", {"options": [1]}, "trainer.npu_profile.options: got [1] (list); allowed: a mapping of npu_profile options"),
    ("actor_rollout_ref.profiler", 5, "actor_rollout_ref.profiler: got 5 (int); allowed: a mapping with discrete, all_ranks, ranks"),
])
def test_legacy_sections_of_the_wrong_type(section, value, message):
    assert message in error_of(None, [f"{section}={value}"])


def test_null_legacy_sections_are_absent():
    cfg = load_config({"actor_rollout_ref": {"critic": None, "rm": None, "profiler": None}, "npu_profile": None,
                       "trainer": {"npu_profile": None}})
    assert not cfg.enabled and cfg.warnings == ()


def test_ranks_as_a_comma_string_is_read_as_the_guides_mean():
    cfg = load_config(None, ON + ["actor_rollout_ref.actor.profiler.ranks='0,1'"])
    assert cfg.roles["actor"].ranks == (0, 1)
    assert any("ranks: got the string '0,1'; read as the list [0, 1]" in w for w in cfg.warnings)


def test_duplicate_ranks_are_an_error_not_a_silent_dedup():
    msg = error_of(None, ON + ["actor_rollout_ref.actor.profiler.ranks=[0,0,1]"])
    assert msg == ("actor_rollout_ref.actor.profiler.ranks: got [0, 0, 1] (list); allowed: each rank at most once "
                   "(listed more than once: [0])")


def test_step_zero_is_refused_because_verl_counts_from_one():
    msg = error_of(None, ["global_profiler.steps=[0, 1]"])
    assert msg.startswith("global_profiler.steps: got [0, 1] (list); allowed: a list of step numbers counted from 1")
    assert "trainer.profile_steps: got [0] (list)" in error_of({"trainer": {"profile_steps": [0]}})


# ----------------------------------------------------------------------------- interpolations


def test_unresolvable_interpolation_is_named_where_it_is_read():
    assert error_of({"critic": "${nope}"}).startswith("critic: cannot be resolved: Interpolation key 'nope' not found")
    assert error_of({"critic": {"profiler": {"enable": "${nope}"}}}).startswith("critic.profiler: cannot be resolved")
    assert error_of(None, ["global_profiler.steps=${nope}"]).startswith("global_profiler: cannot be resolved")


def test_malformed_and_self_referencing_interpolations():
    """A broken interpolation is named by its key (it was ``config: cannot be used as a configuration``, which named
    none: Hypothesis found ``trigger: '${0'`` in tests/runtime/test_unplanned.py)."""
    assert error_of({"global_profiler": {"tool": "${}"}}) == (
        "global_profiler.tool: got '${}', which OmegaConf cannot parse (no viable alternative at input '${}'); "
        "allowed: a complete interpolation such as ${other.key}, or no '${' in the value")
    assert "global_profiler: cannot be resolved: Recursive interpolation detected" in error_of(
        {"global_profiler": {"tool": "${global_profiler.tool}"}})


def test_thousands_of_nested_interpolations_are_refused_before_omegaconf_parses_them():
    """OmegaConf's ANTLR grammar took 28 s to reject 50 000 nested '${'."""
    msg = error_of({"global_profiler": {"tool": "${" * 50_000 + "}" * 50_000}})
    assert msg == "global_profiler.tool: a string with 50000 interpolations ('${'); allowed: at most 64"
    msg = error_of({"global_profiler": {"tool": "${oc.select:x," + "[" * 3000 + "]" * 3000 + "}"}})
    assert msg.startswith("global_profiler.tool: an interpolation with more than 128 brackets")


# ----------------------------------------------------------------------------- sizes


def deep(levels):
    root = node = {}
    for _ in range(levels):
        node["a"] = {}
        node = node["a"]
    return root


def test_deep_nesting_in_a_dict_or_dictconfig():
    msg = error_of({"global_profiler": {"global_tool_config": deep(200)}})
    assert msg.startswith("global_profiler.global_tool_config.a.a.")
    assert msg.endswith(f"nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH} levels of mappings and lists")


def deep_list_dictconfig(levels):
    """``actor_rollout_ref.actor.profiler.ranks: [[[...[1]...]]]`` as a DictConfig: OmegaConf.create
    recurses once per level, so a user builds this only with a raised recursion limit."""
    ranks = [1]
    for _ in range(levels):
        ranks = [ranks]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(50_000)
    try:
        return OmegaConf.create({"actor_rollout_ref": {"actor": {"profiler": {"ranks": ranks}}}})
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("overrides", [(), ("global_profiler.tool=torch",)], ids=["alone", "with overrides"])
def test_a_dictconfig_nested_600_deep_is_a_config_error_not_a_recursion_error(overrides):
    """Issue 24: copying it for the overrides (copy.deepcopy) raised RecursionError; resolving it
    said 'cannot be resolved'. The depth limit now applies to a DictConfig before anything reads it."""
    source = deep_list_dictconfig(600)
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    msg = str(info.value)
    assert msg.startswith("actor_rollout_ref.actor.profiler.ranks.0.0.")
    assert msg.endswith(f"nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH} levels of mappings and lists")
    assert info.value.key.startswith("actor_rollout_ref.actor.profiler.ranks.0")


def test_a_dictconfig_is_checked_without_resolving_it():
    """A list past the limit inside a DictConfig is refused as in a dict; null, missing (``???``) and
    interpolated sections are read as they are written, not resolved, so the check itself cannot fail on them."""
    long_list = OmegaConf.create({"critic": {"profiler": {"ranks": list(range(MAX_LIST + 1))}}})
    assert error_of(long_list) == f"critic.profiler.ranks: a list of {MAX_LIST + 1} items; allowed: at most {MAX_LIST}"
    cfg = OmegaConf.create({"global_profiler": {"tool": "torch", "steps": [1], "save_path": "${oc.env:RLPROF_I24_UNSET,out}"},
                            "critic": {"profiler": None}, "trainer": {"x": "???"}, "reward_model": "${trainer}"})
    loaded = load_config(cfg)
    assert loaded.global_.save_path == "out" and loaded.global_.steps == (1,)


def test_a_self_containing_dict_is_too_deep_not_a_recursion_error():
    cyclic = {"global_profiler": {}}
    cyclic["global_profiler"]["x"] = cyclic
    assert "nested more than 64 levels deep" in error_of(cyclic)


@pytest.mark.timing
def test_alias_bomb_passed_as_a_dict_is_refused_before_expansion():
    """What yaml.safe_load makes of a billion-laughs document: shared lists, 10**9 leaves once copied."""
    bomb = ["lol"] * 10
    for _ in range(8):
        bomb = [bomb] * 10
    started = time.perf_counter()
    msg = error_of({"global_profiler": {"steps": bomb}})
    assert time.perf_counter() - started < 5
    assert msg == (f"config: more than {MAX_VALUES} values (counting each use of a shared value or YAML alias); "
                   f"allowed: at most {MAX_VALUES}")


def test_alias_bomb_in_a_yaml_file(tmp_path):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefgh"[i]
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 10)}]")
    lines.append("global_profiler: {steps: *h}")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    msg = error_of(path)
    assert msg.startswith(f"config file '{path}': YAML aliases expand to too many values")


def test_a_list_longer_than_the_limit():
    msg = error_of({"critic": {"profiler": {"ranks": list(range(MAX_LIST + 1))}}})
    assert msg == f"critic.profiler.ranks: a list of {MAX_LIST + 1} items; allowed: at most {MAX_LIST}"


def run_isolated(code):
    """Run ``code`` in a fresh interpreter: a segfault is a negative return code, not a dead test run."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-2000:]}"
    return proc.stdout


def test_fifty_thousand_nested_brackets_never_reach_the_yaml_composer(tmp_path):
    path = tmp_path / "brackets.yaml"
    path.write_text("global_profiler: {steps: " + "[" * 50_000 + "]" * 50_000 + "}\n")
    out = run_isolated(f"""
        from rlprof import ConfigError, load_config
        try:
            load_config({str(path)!r})
        except ConfigError as exc:
            print(exc)
    """)
    assert out.strip() == f"config file '{path}': nested more than 64 levels deep; allowed: at most 64 levels of mappings and lists"


def test_nesting_the_prescan_misjudges_is_still_caught_while_composing(tmp_path):
    """A quoted scalar hides brackets from the cheap scan; the loader's own depth guard catches the rest."""
    path = tmp_path / "sneaky.yaml"
    path.write_text("global_profiler:\n  steps: " + "[ ']]]]]]]]]]', " * 300 + "]" * 300 + "\n")
    out = run_isolated(f"""
        from rlprof import ConfigError, load_config
        try:
            load_config({str(path)!r})
        except ConfigError as exc:
            print(exc)
    """)
    assert "nested more than 64 levels deep" in out


def test_deep_override_value_never_reaches_the_yaml_composer():
    msg = error_of(None, ["global_profiler.steps=" + "[" * 50_000 + "]" * 50_000])
    assert msg.startswith("override 'global_profiler.steps=[[[[")
    assert msg.endswith("nested more than 64 levels deep; allowed: at most 64 levels of mappings and lists")


# ----------------------------------------------------------------------------- files and overrides


def test_yaml_file_whose_top_level_is_a_list(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- global_profiler\n- steps\n")
    assert error_of(path) == (f"config file '{path}': the top level is a list (['global_profiler', 'steps']); "
                              "allowed: a mapping of sections (global_profiler, actor_rollout_ref, critic, ...)")
    path.write_text("just text\n")
    assert "the top level is a str value ('just text')" in error_of(path)


def test_yaml_file_that_is_not_yaml_or_not_text(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("global_profiler: {steps: [1}\n")
    assert error_of(path).startswith(f"config file '{path}': not valid YAML: ")
    path.write_bytes(b"\xff\xfe\x00bad")
    assert error_of(path).startswith(f"config file '{path}': not UTF-8 text")
    assert error_of("no\0such.yaml").startswith("config file 'no\\x00such.yaml': ")


def test_a_bad_override_says_which_override():
    msg = error_of(None, ["global_profiler.tool=torch", "global_profiler.steps=[1", "critic.profiler.enable=true"])
    assert msg.startswith("override 'global_profiler.steps=[1': not valid YAML")
    msg = error_of(None, ["global_profiler.steps=[1]", "global_profiler.steps.a=1"])
    assert msg.startswith("override 'global_profiler.steps.a=1': cannot be applied")
    assert error_of(None, ["global profiler.tool=x"]).startswith(
        "override 'global profiler.tool=x': the key 'global profiler.tool' is not a dotted key path")
    assert error_of(None, [5]).startswith("override 5 (int): allowed: a 'key=value' string")
    assert error_of(None, 5) == "overrides: got 5 (int); allowed: a list of 'key=value' strings"
    assert load_config(None, None).global_.steps is None
    assert load_config(None, "global_profiler.steps=[2]").global_.steps == (2,)  # one override given as a string


def test_hydra_delete_override():
    base = {"global_profiler": {"tool": "torch", "steps": [1]}}
    assert load_config(base, ["~global_profiler.tool"]).global_.tools == ()
    assert base["global_profiler"]["tool"] == "torch", "the caller's config is never changed"
    assert error_of(base, ["~global_profiler.save_path"]) == (
        "override '~global_profiler.save_path': global_profiler.save_path is not set, so there is nothing to delete; "
        "allowed: ~ followed by a key that is set")
    assert "'~key=value' (delete only when equal) is not supported" in error_of(base, ["~global_profiler.tool=torch"])


def test_overrides_on_a_struct_dictconfig_do_not_touch_it():
    cfg = OmegaConf.create({"global_profiler": {"tool": "torch", "steps": [1]}})
    OmegaConf.set_struct(cfg, True)
    loaded = load_config(cfg, ["global_profiler.save_path=/tmp/x", "++critic.profiler.enable=true"])
    assert loaded.global_.save_path == "/tmp/x" and loaded.roles["critic"].enable
    assert "save_path" not in cfg.global_profiler


@pytest.mark.parametrize("value, allowed", [
    ("a\0b", "a directory path without NUL characters"),
    ("x/" + "n" * 300, "a directory path whose names are at most 255 bytes each"),
    (5, "a directory path (string)"),
])
def test_save_path_text_is_checked_when_loading(value, allowed):
    msg = error_of({"global_profiler": {"save_path": value}})
    assert msg.startswith("global_profiler.save_path: got ") and allowed in msg


def test_profiler_refuses_an_unusable_save_path_with_a_config_error(tmp_path):
    import rlprof

    a_file = tmp_path / "a-file"
    a_file.write_text("keep")
    with pytest.raises(ConfigError) as info:
        rlprof.Profiler(None, overrides=ON + ["actor_rollout_ref.actor.profiler.all_ranks=true",
                                              f"global_profiler.save_path={a_file}"], backends={"torch": object()})
    assert str(info.value).startswith(f"global_profiler.save_path: got '{a_file}': ")
    assert info.value.key == "global_profiler.save_path"
    assert a_file.read_text() == "keep"


def test_unsupported_values_in_a_dict_are_named():
    assert error_of({"global_profiler": {"steps": {1, 2}}}) == (
        "global_profiler.steps: got {1, 2} (set); allowed: a mapping, list, string, number, bool or null")


# ----------------------------------------------------------------------------- settings that would be ignored


def test_a_tool_section_of_an_unselected_tool_warns():
    cfg = load_config(None, ON + ["actor_rollout_ref.actor.profiler.all_ranks=true",
                                  "actor_rollout_ref.actor.profiler.tool_config.npu.discrete=true"])
    assert cfg.warnings == (
        "actor_rollout_ref.actor.profiler.tool_config.npu: sets discrete=true but npu is not a selected tool "
        "(global_profiler.tool=[torch]): ignored; add npu to global_profiler.tool to use it",)


def test_verl_default_tool_sections_do_not_warn(verl_generated_config):
    cfg = load_config(verl_generated_config, ["global_profiler.tool=torch", "global_profiler.steps=[1]",
                                              "actor_rollout_ref.actor.profiler.enable=true",
                                              "actor_rollout_ref.actor.profiler.all_ranks=true"])
    assert not [w for w in cfg.warnings if "not a selected tool" in w], cfg.warnings


def test_a_guide_example_without_tool_says_how_to_switch_profiling_on(tmp_path):
    """The NPU guide's end-to-end example with its ``tool: npu`` line left out."""
    path = tmp_path / "guide.yaml"
    path.write_text(textwrap.dedent("""
        global_profiler:
           steps: [1, 2, 5]
        actor_rollout_ref:
           actor:
              profiler:
                 enable: True
                 all_ranks: True
                 tool_config:
                    npu:
                       discrete: False
                       contents: [npu, cpu]
    """))
    cfg = load_config(path)
    assert not cfg.enabled
    assert cfg.warnings == ("profiling is off because global_profiler.tool is not set, but tool_config.npu is: "
                            "set global_profiler.tool=npu to profile with it",)
