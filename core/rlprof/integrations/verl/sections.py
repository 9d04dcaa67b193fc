"""verl's profiler objects as rlprof configuration: read once, when a verl worker builds its profiler.

verl hands a worker its role's ``profiler`` section as a ``ProfilerConfig`` dataclass (or an OmegaConf
node, or a dict) and the tool's settings separately as a dataclass (``TorchProfilerToolConfig``...).
Two details of those objects are not configuration and are dropped here, so rlprof's checks see
what a user wrote and nothing else:

* ``"???"`` — OmegaConf's *missing* marker, the dataclass default of ``tool``, ``save_path`` and
  ``tool_config`` (``ProfilerConfig(tool="torch", enable=True)`` leaves them so): treated as unset;
* ``name`` fields of verl's tool-config dataclasses (``TorchProfilerScheduleConfig.name ==
  "torch_schedule"``): a label of the class, never something the user set.

One is put back: ``_target_``, verl's marker of a section its config generated, which its dataclasses
carry empty. A verl dataclass is marked with its class (``verl.utils.profiler.config.TorchProfilerToolConfig``,
what verl's YAML writes), so that rlprof reads a worker's section as ``rlprof check`` reads the same
YAML: ``discrete: false`` in it is verl's default, not a choice that outvotes ``global_profiler.discrete``
(:func:`rlprof.config.unselected.written_by_verl`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from rlprof.config.fields import VERL_MARKER, mirrored_keys
from rlprof.config.schema import ROLE_PATHS, ROLES
from rlprof.config.sections import GlobalConfig

MISSING = "???"

PROFILER_KEYS = ("enable", "all_ranks", "ranks", "discrete")
"""Keys of verl's role section that go to each hosted role's ``profiler`` section."""
ROLE_SECTION_GLOBALS = tuple(sorted(mirrored_keys(GlobalConfig) - {"tool"})) + ("global_tool_config",)
"""Keys of verl's role section that are global in rlprof: those verl mirrors into every role (declared
``mirrored``; ``tool`` is read apart, as a list) and ``global_tool_config``, a field of verl's
``ProfilerConfig`` that its config leaves unset. rlprof's other global keys come from the trainer
(:mod:`rlprof.integrations.verl.global_keys`)."""

HOSTED_ROLES = {
    "actor_rollout_ref": ("actor", "rollout", "ref"),
    "actor_rollout": ("actor", "rollout"),
    "actor": ("actor",),
    "rollout": ("rollout",),
    "ref": ("ref",),
    "critic": ("critic",),
    "reward": ("reward",),
    "language_model": ("actor",),
    "value_model": ("critic",),
    "reward_model": ("reward",),
}
"""verl's ``save_file_prefix`` (a worker's ``role``, or a TrainingWorker's ``model_type``) → the roles
that process hosts. The critic's TrainingWorker says ``value_model``; the actor's says ``language_model``."""


def hosted_roles(save_file_prefix: str | None) -> tuple[str, ...]:
    """The roles a verl worker built with ``save_file_prefix`` hosts; ``("actor",)`` when unknown."""
    if save_file_prefix in HOSTED_ROLES:
        return HOSTED_ROLES[save_file_prefix]
    for role in ROLES:  # "critic_worker", "ref_1"...: the role it starts with
        if isinstance(save_file_prefix, str) and save_file_prefix.startswith(role):
            return (role,)
    return ("actor",)


def plain(value: Any) -> Any:
    """``value`` as plain dicts/lists/scalars with verl's markers removed (see the module doc)."""
    if _is_omegaconf(value):
        from omegaconf import OmegaConf

        value = OmegaConf.to_container(value, resolve=False)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "name" and _from_verl(value) and item == f.default:
                continue
            if f.name == VERL_MARKER and _from_verl(value) and not item:  # verl generated it: say so (module doc)
                item = f"{type(value).__module__}.{type(value).__qualname__}"
            if item == MISSING:
                continue
            out[f.name] = plain(item)
        return out
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if v != MISSING}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return None if value == MISSING else value


def field(config: Any, key: str, default: Any = None) -> Any:
    """``config.key`` for a dataclass, a mapping or an OmegaConf node; ``"???"`` counts as unset."""
    if config is None:
        return default
    if isinstance(config, Mapping) or _is_omegaconf(config):
        try:
            value = config.get(key, default)
        except Exception:  # an OmegaConf node with a missing mandatory value raises on access
            return default
    else:
        value = getattr(config, key, default)
    return default if value == MISSING else value


def tools_of(config: Any) -> list[str]:
    """``config.tool`` as a list of backend names (verl: one name; rlprof also takes a list)."""
    tool = field(config, "tool")
    if tool is None or tool == "":
        return []
    if isinstance(tool, str):
        return [t.strip() for t in tool.split(",") if t.strip()]
    return [str(t) for t in plain(tool)]


def role_section(config: Any, tool_config: Any) -> dict[str, Any]:
    """verl's role section ``config`` as plain values, the tool's settings ``tool_config`` (what the
    worker passed explicitly) under ``tool_config.<first tool>``: a section :func:`rlprof_source` reads
    as it reads the two, for a process that is handed it as data (a rollout replica, see
    :func:`rlprof.integrations.verl.run_signals.publish_rollout_section`)."""
    section = plain(config) if config is not None else {}
    section = dict(section) if isinstance(section, dict) else {}
    tools = tools_of(config)
    explicit = plain(tool_config) if tool_config is not None else None
    if tools and isinstance(explicit, dict):
        per_tool = section.get("tool_config")
        section["tool_config"] = {**(per_tool if isinstance(per_tool, dict) else {}), tools[0]: explicit}
    return section


def rlprof_source(config: Any, tool_config: Any, roles: tuple[str, ...],
                  from_trainer: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The rlprof configuration (verl's layout) of a process hosting ``roles`` whose verl worker was
    given the role section ``config`` and the tool's settings ``tool_config``.

    The section applies to every hosted role (verl builds one profiler per worker from the section of
    its main role). ``tool_config`` wins over ``config.tool_config.<tool>`` for the first tool, as in
    verl, where the worker passes it explicitly. ``from_trainer``: rlprof's own ``global_profiler`` keys
    set in the trainer's config, which no role section carries
    (:func:`rlprof.integrations.verl.global_keys.received`).
    """
    tools = tools_of(config)
    role_section: dict[str, Any] = {}
    for key in PROFILER_KEYS:
        value = field(config, key)
        if value is not None:
            role_section[key] = plain(value)
    per_tool = field(config, "tool_config")
    per_tool = plain(per_tool) if per_tool is not None else {}
    if not isinstance(per_tool, dict):
        per_tool = {}
    tool_configs = {name: per_tool.get(name) or {} for name in tools if isinstance(per_tool.get(name) or {}, dict)}
    if tools and tool_config is not None:
        explicit = plain(tool_config)
        if isinstance(explicit, dict):
            tool_configs[tools[0]] = explicit
    role_section["tool_config"] = {name: section for name, section in tool_configs.items() if section}
    global_section: dict[str, Any] = {"tool": tools or None}
    for key in ROLE_SECTION_GLOBALS:
        value = field(config, key)
        if value is not None:
            global_section[key] = plain(value)
    for key, value in (from_trainer or {}).items():
        global_section.setdefault(key, value)
    if global_section.get("finish_hook_ranks") == []:
        del global_section["finish_hook_ranks"]  # verl's "unset": the profiled ranks
    if not isinstance(global_section.get("global_tool_config"), dict) or not global_section.get("global_tool_config"):
        global_section.pop("global_tool_config", None)
    else:
        global_section["global_tool_config"] = {k: v for k, v in global_section["global_tool_config"].items()
                                                if k in tools and isinstance(v, dict)}
    raw: dict[str, Any] = {"global_profiler": global_section}
    for role in roles:
        node = raw
        for part in ROLE_PATHS[role].split("."):
            node = node.setdefault(part, {})
        node["profiler"] = dict(role_section)
    return raw


def _is_omegaconf(value: Any) -> bool:
    module = type(value).__module__
    return module.startswith("omegaconf")


def _from_verl(value: Any) -> bool:
    return type(value).__module__.startswith("verl.")
