"""Non-string keys (issue 40): in every section rlprof reads, at any depth and in every input form,
a key that is not a string is a ConfigError naming where it is, the key and its type, and that keys
must be strings; never a traceback (``sorted()`` over mixed key types used to raise TypeError).
Outside the profiler sections a trainer config's keys are verl's business (e.g. a model's
``id2label: {0: ...}``), unless no configuration can hold them at all (``null``, a tuple)."""

import pytest
import yaml
from omegaconf import OmegaConf

from rlprof import ConfigError, load_config
from rlprof.errors import ConfigErrors
from rlprof.runtime.checking import check_config

ON = {"tool": "torch", "steps": [1]}


def at(dotted: str, value) -> dict:
    """A config with ``global_profiler`` switched on and ``value`` at the dotted path."""
    doc: dict = {"global_profiler": dict(ON), "critic": {"profiler": {"enable": True, "ranks": [0]}}}
    node = doc
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return doc


# (where the mapping is, the mapping holding a non-string key, the key)
CASES = [
    ("global_profiler", {**ON, 1: 2}, 1),
    ("global_profiler.global_tool_config", {1: {"contents": ["cpu"]}}, 1),
    ("global_profiler.global_tool_config.torch", {"contents": ["cpu"], 2.5: "x"}, 2.5),
    ("critic.profiler", {"enable": True, "ranks": [0], False: 1}, False),
    ("critic.profiler.tool_config", {"torch": {}, True: None}, True),  # the case
    ("critic.profiler.tool_config.torch", {"contents": ["cpu"], 7: True}, 7),
    ("critic.profiler.tool_config.torch.schedule", {"wait": 1, "active": 1, 3: 1}, 3),
    ("actor_rollout_ref.actor.profiler.tool_config.torch", {"contents": ["cpu"], None: 1}, None),
    ("npu_profile.options", {"level": "level1", 0: 1}, 0),
    ("actor_rollout_ref.rollout.profiler", {"enable": True, "ranks": [0], "tool_config": {"torch": {"x": {5: 1}}}}, 5),
]


def as_form(doc: dict, form: str, tmp_path):
    if form == "dict":
        return doc
    if form == "dictconfig":
        return OmegaConf.create(doc)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize("form", ["dict", "dictconfig", "yaml"])
@pytest.mark.parametrize("where, mapping, bad", CASES, ids=[c[0] + f"[{c[2]!r}]" for c in CASES])
def test_a_non_string_key_in_a_profiler_section_is_named(where, mapping, bad, form, tmp_path):
    if form == "dictconfig" and bad is None:
        pytest.skip("a DictConfig cannot hold a null key")
    doc = at(where, mapping)
    source = as_form(doc, form, tmp_path)
    for read in (lambda: load_config(source), lambda: check_config(source, world_size=2)):
        with pytest.raises(ConfigError) as info:
            read()
        errors = info.value.errors if isinstance(info.value, ConfigErrors) else [info.value]
        named = [e for e in errors if "keys must be strings" in str(e)]
        assert len(named) == 1, [str(e) for e in errors]
        hit = named[0]
        # the innermost mapping holding it, the key as written and its type
        holder = where if not isinstance(mapping.get("tool_config"), dict) else f"{where}.tool_config.torch.x"
        assert str(hit).startswith(f"{holder}: got the key {bad!r} ({type(bad).__name__}); allowed: "), str(hit)
        assert hit.value == bad


@pytest.mark.parametrize("form", ["dict", "dictconfig", "yaml"])
def test_a_non_string_key_hides_no_other_mistake(form, tmp_path):
    doc = at("critic.profiler.tool_config", {"torch": {}, True: None})
    doc["global_profiler"]["steps"] = "often"
    with pytest.raises(ConfigErrors) as info:
        check_config(as_form(doc, form, tmp_path), world_size=2)
    text = str(info.value)
    assert "critic.profiler.tool_config: got the key True (bool)" in text
    assert "global_profiler.steps: got 'often'" in text


def test_a_non_string_key_written_by_an_override_is_named():
    with pytest.raises(ConfigError) as info:
        load_config(at("critic.profiler.tool_config", {"torch": {}}), ["critic.profiler.tool_config={torch: {}, 1: null}"])
    assert str(info.value).startswith("critic.profiler.tool_config: got the key 1 (int); allowed: ")


@pytest.mark.parametrize("form", ["dict", "dictconfig", "yaml"])
def test_keys_outside_the_profiler_sections_are_left_to_the_trainer(form, tmp_path):
    doc = at("actor_rollout_ref.model.override_config.id2label", {0: "NEGATIVE", 1: "POSITIVE"})
    doc[2] = "top-level"
    assert load_config(as_form(doc, form, tmp_path)).global_.tools == ("torch",)


@pytest.mark.parametrize("form", ["dict", "yaml"])
def test_a_key_no_configuration_can_hold_is_named_wherever_it_is(form, tmp_path):
    doc = at("trainer.logger_options", {None: "x"})
    with pytest.raises(ConfigError) as info:
        load_config(as_form(doc, form, tmp_path))
    assert "trainer.logger_options: got the key None (NoneType); allowed: " in str(info.value)
    assert "keys must be strings" in str(info.value)
    if form == "dict":
        with pytest.raises(ConfigError, match=r"trainer: got the key \(1, 2\) \(tuple\)"):
            load_config(at("trainer", {(1, 2): 1}))
