"""Migration of the older guides' keys to today's, one deprecation warning per key.

Covered (see shared/seeds/002 and 004):

* ``trainer.profile_steps``                       -> ``global_profiler.steps``
* ``<role>.profile_ranks`` / ``profile_ranks_all`` -> ``<role>.profiler.ranks`` / ``all_ranks`` (+ ``enable``)
* ``<role>.profile_discrete``                     -> ``<role>.profiler.tool_config.<tool>.discrete``
  (roles also found at ``actor_rollout_ref.critic`` and ``actor_rollout_ref.rm``)
* ``actor_rollout_ref.profiler.{discrete, all_ranks, ranks}`` -> ``actor_rollout_ref.actor.profiler.*``
  (rollout and ref follow actor, as they did)
* ``npu_profile.options.{save_path, level, record_shapes, with_memory, with_npu, with_cpu,
  with_module, with_stack, analysis}`` (also under ``trainer.``) -> ``global_profiler.save_path`` and
  ``actor_rollout_ref.actor.profiler.tool_config.npu.{level, contents, analysis}``
* ``npu_profile.options.roles`` (verl's ``npu_profile.yaml``: ``[all]`` or the regions
  ``rollout_generate, actor_compute_log_prob, actor_update, ref_compute_log_prob``) -> the ``enable``
  of actor, rollout and ref; a region selects its whole role (rlprof selects roles, not regions)

The older configs had no ``tool`` key: the nsys guide's keys imply ``nsys``, the NPU guide's
``npu``; the migration sets it (with a warning) when ``global_profiler.tool`` is not set.
Where both an old and a new key are given, the new one wins and the warning says so.
"""

from __future__ import annotations

import copy
from typing import Any

from rlprof.errors import ConfigError, did_you_mean, fail, unknown_key
from rlprof.config.fields import shape
from rlprof.config.sections import GlobalConfig
from rlprof.roles import ROLE_PATHS, nest_profiler, profiler_path
from rlprof.tool_config import parse_bool
from rlprof.config.values import parse_ranks, parse_steps

LEGACY_ROLE_ALIASES = {"actor_rollout_ref.critic": "critic", "actor_rollout_ref.rm": "reward"}
"""Sections of the nsys guide that held a role's keys where verl no longer has that role -> the role."""
LEGACY_ROLE_KEYS = ("profile_ranks", "profile_ranks_all", "profile_discrete")
"""The nsys guide's keys directly in a role's section (``actor_rollout_ref.actor.profile_ranks``)."""
NPU_SECTIONS = ("trainer.npu_profile", "npu_profile")
"""Where the NPU guide's worker-wide ``npu_profile`` section may be."""
LEGACY_SELECTIONS = ("trainer.profile_steps", *NPU_SECTIONS, "actor_rollout_ref.profiler", *LEGACY_ROLE_ALIASES)
"""Every key path outside today's profiler sections that :func:`migrate` reads: the loader selects
these from a trainer config, as they are, into ``raw["legacy"]``."""
NPU_OPTION_CONTENTS = {
    "with_npu": "npu",
    "with_cpu": "cpu",
    "with_memory": "memory",
    "record_shapes": "shapes",
    "with_module": "module",
    "with_stack": "stack",
}
NPU_OPTIONS = {"save_path", "level", "analysis", "roles", *NPU_OPTION_CONTENTS}
NPU_ROLE_FILTER = {
    "rollout_generate": "rollout",
    "actor_compute_log_prob": "actor",
    "actor_update": "actor",
    "ref_compute_log_prob": "ref",
    "actor": "actor",
    "rollout": "rollout",
    "ref": "ref",
}
"""``npu_profile.options.roles``: the regions verl's npu_profile.yaml names (and the roles themselves)
-> the role whose ``enable`` they set. ``all`` selects every role (nothing to migrate)."""


def migrate(raw: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Return the sections in today's keys and the deprecation warnings (one per legacy key)."""
    raw = copy.deepcopy(dict(raw))
    legacy = raw.pop("legacy", {}) or {}
    warnings: list[str] = []
    g = raw.get("global_profiler")
    if g is None:
        g = {}
    if not isinstance(g, dict):
        raise fail("global_profiler", g, shape(GlobalConfig))
    raw["global_profiler"] = g
    roles = raw.setdefault("roles", {})
    implied_tool: str | None = None

    def warn(old: str, new: str, value: Any) -> None:
        warnings.append(f"{old} is deprecated: use {new}={_show(value)}")

    if "trainer.profile_steps" in legacy:
        value = legacy["trainer.profile_steps"]
        parse_steps(value, "trainer.profile_steps")  # a wrong type is named by the key the user wrote
        if g.get("steps") is None:
            g["steps"] = value
            warn("trainer.profile_steps", "global_profiler.steps", value)
        else:
            warnings.append(f"trainer.profile_steps is deprecated and ignored: global_profiler.steps={_show(g['steps'])} is set")

    # nsys-era per-role keys (seed 004)
    for path, role in LEGACY_ROLE_ALIASES.items():
        section = legacy.get(path)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise fail(path, section, "a mapping with profile_ranks, profile_ranks_all, profile_discrete")
        entry = {k: section[k] for k in LEGACY_ROLE_KEYS if k in section}
        if entry:
            roles.setdefault(role, {}).update({f"_{k}": (path, v) for k, v in entry.items()})

    for role, entry in roles.items():
        old_keys = {}
        for key in LEGACY_ROLE_KEYS:
            if key in entry:
                old_keys[key] = (ROLE_PATHS[role], entry.pop(key))
            if f"_{key}" in entry:
                old_keys[key] = entry.pop(f"_{key}")
        if not old_keys:
            continue
        implied_tool = implied_tool or "nsys"
        tool = _first_tool(g.get("tool")) or implied_tool
        new_base = profiler_path(role)
        profiler = _section(entry, "profiler", new_base)
        if "profile_ranks_all" in old_keys:
            base, value = old_keys["profile_ranks_all"]
            value = parse_bool(value, f"{base}.profile_ranks_all")
            profiler.setdefault("all_ranks", value)
            warn(f"{base}.profile_ranks_all", f"{new_base}.all_ranks", value)
        if "profile_ranks" in old_keys:
            base, value = old_keys["profile_ranks"]
            ranks = list(parse_ranks(value, f"{base}.profile_ranks"))
            profiler.setdefault("ranks", ranks)
            warn(f"{base}.profile_ranks", f"{new_base}.ranks", ranks)
            if value is None:
                warnings.append(
                    f"{base}.profile_ranks=null means no ranks (the nsys guide: 'null and [] means no ranks'); "
                    f"set {new_base}.all_ranks=true to profile every rank"
                )
        if "profile_discrete" in old_keys:
            base, value = old_keys["profile_discrete"]
            value = parse_bool(value, f"{base}.profile_discrete")
            tool_section = _section(_section(profiler, "tool_config", f"{new_base}.tool_config"), tool, f"{new_base}.tool_config.{tool}")
            tool_section.setdefault("discrete", value)
            warn(f"{base}.profile_discrete", f"{new_base}.tool_config.{tool}.discrete", value)
        profiler.setdefault("enable", bool(profiler.get("all_ranks") or profiler.get("ranks")))

    # NPU-era worker-wide section (seed 002)
    enable_written = {role for role in NPU_ROLE_FILTER.values()
                      if isinstance((roles.get(role) or {}).get("profiler"), dict) and "enable" in roles[role]["profiler"]}
    arr = legacy.get("actor_rollout_ref.profiler")
    npu_options = None
    for path in NPU_SECTIONS:
        if legacy.get(path) is None:
            continue
        if not isinstance(legacy[path], dict):
            raise fail(path, legacy[path], "a mapping with an options mapping (save_path, level, with_npu, ...)")
        options = legacy[path].get("options", legacy[path])
        npu_options = (f"{path}.options" if "options" in legacy[path] else path, options)
    if isinstance(arr, dict) or npu_options:
        implied_tool = implied_tool or "npu"
    tool = _first_tool(g.get("tool")) or implied_tool
    if isinstance(arr, dict):
        actor = roles.setdefault("actor", {})
        profiler = _section(actor, "profiler", profiler_path("actor"))
        for key, value in arr.items():
            if key == "_target_":
                continue
            if key not in ("discrete", "all_ranks", "ranks"):
                raise unknown_key("actor_rollout_ref.profiler", key, ("discrete", "all_ranks", "ranks"))
            if key == "discrete":
                tool_config = _section(profiler, "tool_config", "actor_rollout_ref.actor.profiler.tool_config")
                _section(tool_config, tool, f"actor_rollout_ref.actor.profiler.tool_config.{tool}").setdefault("discrete", value)
                warn("actor_rollout_ref.profiler.discrete", f"actor_rollout_ref.actor.profiler.tool_config.{tool}.discrete", value)
            else:
                profiler.setdefault(key, value)
                warn(f"actor_rollout_ref.profiler.{key}", f"actor_rollout_ref.actor.profiler.{key}", value)
        profiler.setdefault("enable", True)
    elif arr is not None:
        raise fail("actor_rollout_ref.profiler", arr, "a mapping with discrete, all_ranks, ranks")
    if npu_options:
        base, options = npu_options
        if not isinstance(options, dict):
            raise fail(base, options, "a mapping of npu_profile options")
        profiler = _section(roles.setdefault("actor", {}), "profiler", profiler_path("actor"))
        tool_config = _section(profiler, "tool_config", "actor_rollout_ref.actor.profiler.tool_config")
        npu = _section(tool_config, "npu", "actor_rollout_ref.actor.profiler.tool_config.npu")
        contents: list[str] = []
        for key, value in options.items():
            if key not in NPU_OPTIONS:
                raise unknown_key(base, key, NPU_OPTIONS)
            if key == "save_path":
                if g.get("save_path") is None:
                    g["save_path"] = value
                warn(f"{base}.save_path", "global_profiler.save_path", value)
            elif key in ("level", "analysis"):
                npu.setdefault(key, value)
                warn(f"{base}.{key}", f"actor_rollout_ref.actor.profiler.tool_config.npu.{key}", value)
            elif key == "roles":
                continue  # below, once the actor's section is complete: rollout and ref may copy it
            elif value:
                contents.append(NPU_OPTION_CONTENTS[key])
        flags = [k for k in options if k in NPU_OPTION_CONTENTS]
        if flags:
            npu.setdefault("contents", contents)
            warnings.append(
                f"{base}.{{{', '.join(flags)}}} are deprecated: use actor_rollout_ref.actor.profiler.tool_config.npu.contents={_show(contents)}"
            )
        if "roles" in options:
            _migrate_role_filter(f"{base}.roles", options["roles"], roles, enable_written, warnings)
    if implied_tool and not g.get("tool") and g.get("steps") is not None:
        g["tool"] = implied_tool
        warnings.append(f"the legacy keys imply global_profiler.tool={implied_tool}: set it explicitly")
    if not g:
        raw.pop("global_profiler")
    return raw, warnings


def _migrate_role_filter(path: str, value: Any, roles: dict[str, Any], enable_written: set[str],
                         warnings: list[str]) -> None:
    """``npu_profile.options.roles`` -> the ``enable`` of actor, rollout and ref.

    ``[all]`` (verl's default) selects every role: nothing changes. Otherwise each listed region
    selects its role and the others are switched off; rollout and ref, which followed the actor,
    get a copy of the actor's section with their own ``enable``. An ``enable`` the user wrote in a
    role's section wins."""
    allowed = "a list of all, " + ", ".join(NPU_ROLE_FILTER)
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise fail(path, value, allowed)
    for name in names:
        if name != "all" and name not in NPU_ROLE_FILTER:
            raise ConfigError(f"{path}: got {name!r}{did_you_mean(name, ['all', *NPU_ROLE_FILTER])}; allowed: {allowed}", key=path)
    if "all" in names:
        warnings.append(f"{path}={_show(names)} is deprecated: every role is selected by its profiler.enable "
                        "(rollout and ref follow the actor's)")
        return
    chosen = {NPU_ROLE_FILTER[n] for n in names}
    actor = _section(roles.setdefault("actor", {}), "profiler", profiler_path("actor"))
    for role in ("rollout", "ref"):
        entry = roles.setdefault(role, {})
        if entry.get("profiler") is None:  # it followed the actor: it still does, but for enable
            entry["profiler"] = copy.deepcopy(actor)
    for role in ("actor", "rollout", "ref"):
        if role not in enable_written:
            _section(roles[role], "profiler", profiler_path(role))["enable"] = role in chosen
    kept = [r for r in ("actor", "rollout", "ref") if r not in enable_written]
    if not kept:
        warnings.append(f"{path}={_show(names)} is deprecated and ignored: every role's profiler.enable is set")
        return
    new = ", ".join(f"{profiler_path(r)}.enable={_show(r in chosen)}" for r in kept)
    sibling = {"actor_update": "actor_compute_log_prob", "actor_compute_log_prob": "actor_update"}
    partial = [n for n in names if n in sibling and sibling[n] not in names]
    whole = f" ({partial[0]} selects the whole actor role: {sibling[partial[0]]} is profiled too)" if partial else ""
    warnings.append(f"{path}={_show(names)} is deprecated: use {new}{whole}")


def _section(parent: dict[str, Any], key: str, path: str) -> dict[str, Any]:
    """``parent[key]`` as a mapping to migrate into, created when absent or null; a section of
    another type (a list, a number) is refused with its key path."""
    section = parent.get(key)
    if section is None:
        section = parent[key] = {}
    if not isinstance(section, dict):
        raise fail(path, section, "a mapping")
    return section


def _first_tool(tool: Any) -> str | None:
    if isinstance(tool, str) and tool:
        return tool.split(",")[0].strip()
    if isinstance(tool, (list, tuple)) and tool:
        return str(tool[0])
    return None


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def to_verl_layout(raw: dict[str, Any]) -> dict[str, Any]:
    """The migrated sections (as :func:`migrate` returns them) in verl's own key layout."""
    doc: dict[str, Any] = {}
    if raw.get("global_profiler"):
        doc["global_profiler"] = copy.deepcopy(raw["global_profiler"])
    for role, entry in (raw.get("roles") or {}).items():
        if entry.get("profiler") is not None:
            nest_profiler(doc, role, copy.deepcopy(entry["profiler"]))
    if raw.get("rollout_mode") is not None:
        doc.setdefault("actor_rollout_ref", {}).setdefault("rollout", {})["mode"] = raw["rollout_mode"]
    for key, value in (raw.get("rollout_parallel") or {}).items():  # what a replica spans, for rlprof check
        doc.setdefault("actor_rollout_ref", {}).setdefault("rollout", {})[key] = value
    return doc


def to_modern_yaml(doc: dict[str, Any]) -> str:
    """A verl-layout document as YAML (``rlprof check --migrate``)."""
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


__all__ = ["migrate", "to_verl_layout", "to_modern_yaml", "ConfigError"]
