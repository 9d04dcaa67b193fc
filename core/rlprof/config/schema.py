"""verl-compatible profiler configuration: read it from anywhere, check it, type it.

Accepts what verl users already have: a YAML file, a dict, an OmegaConf ``DictConfig`` (what
verl hands its workers), dotted overrides (``global_profiler.steps=[1,2]``), or any mix, overrides
winning. Only the profiler sections are read (``global_profiler``, each role's ``profiler``, and the
legacy keys of older guides, see :mod:`rlprof.config.legacy`); the rest of a trainer config is left alone,
so a full ``_generated_ppo_trainer.yaml`` with unresolved ``???`` values elsewhere still loads.

Inside the profiler sections every key verl defines is understood or knowingly ignored; any other
key is a :class:`ConfigError` with a did-you-mean.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from rlprof.errors import ConfigError, did_you_mean, fail, unknown_key
from rlprof.config.legacy import migrate, to_verl_layout
from rlprof.config.limits import check_tree
from rlprof.roles import FOLLOWS_ACTOR, ROLE_PATHS, ROLES, profiler_path  # noqa: F401  (re-exported: older imports)
from rlprof.config.schedule import Schedule, parse_schedule, token_window
from rlprof.config.values import DEFAULT_SAVE_PATH, parse_bool, parse_ranks, parse_save_path, parse_steps, parse_tools

VERL_TOOLS = ("nsys", "npu", "torch", "torch_memory", "precision_debugger")
"""Tool names verl's config defines sections for; their sections are never "unknown"."""

GLOBAL_KEYS = {
    "tool", "steps", "save_path", "profile_continuous_steps", "global_tool_config",
    "relocate_results", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks", "_target_",
}
ROLE_KEYS = {
    "enable", "all_ranks", "ranks", "tool_config", "schedule", "discrete", "_target_",
    # verl mirrors these global keys into every role (by interpolation); the global value rules.
    "tool", "save_path", "relocate_results", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks",
}
CORE_TOOL_KEYS = ("_target_", "discrete", "schedule", "profile_token_start", "profile_token_end")
"""Keys inside ``tool_config.<tool>`` that the core owns; backends never see them."""

VERL_TOOL_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "nsys": {"discrete": False},
    "npu": {"contents": [], "level": "level0", "analysis": True, "discrete": False},
    "torch": {"contents": [], "discrete": False, "schedule": {"skip_first": 0, "wait": 0, "warmup": 0, "active": 0, "repeat": 0}},
    "torch_memory": {"trace_alloc_max_entries": 100000, "stack_depth": 32, "memory_snapshot_num_steps": 1,
                     "context": "all", "stacks": "all", "kw_args": {}},
    "precision_debugger": {"config_path": None, "steps": None, "stages": None, "strict": False},
}
"""The values verl 0.9.1's generated trainer config writes into every tool section. A section of a
tool that is not selected warns only about values that differ from these (verl writes a section for
every tool into every role; that is not the user asking for anything)."""
_VERL_BOOKKEEPING = ("_target_", "name", "controller_nsight_options", "worker_nsight_options")


@dataclass(frozen=True)
class RoleConfig:
    """One role's ``profiler`` section, typed. ``discrete`` and ``schedule`` are already resolved
    from wherever verl lets users write them."""

    name: str
    key_path: str
    enable: bool = False
    all_ranks: bool = False
    ranks: tuple[int, ...] = ()
    discrete: bool = False
    schedule: Schedule | None = None
    tool_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per tool: ``global_tool_config.<tool>`` merged under the role's ``tool_config.<tool>``, core keys removed."""
    follows: str | None = None
    """Set to ``actor`` when this role had no section of its own."""


@dataclass(frozen=True)
class GlobalConfig:
    tools: tuple[str, ...] = ()
    steps: tuple[int, ...] | None = None
    save_path: str = DEFAULT_SAVE_PATH
    profile_continuous_steps: bool = False
    global_tool_config: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    relocate_results: bool = False
    finish_hook_cmd: str | None = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: tuple[int, ...] | None = None
    """None: the default (the profiled ranks); a tuple: exactly those ranks."""
    caller_steps: bool = False
    """The caller decides which steps are profiled (verl's trainer calls start_profile only on
    profiled steps): every ``start_step`` is a profiled step. Set by :mod:`rlprof.verl`, never by YAML."""


@dataclass(frozen=True)
class ProfilerConfig:
    """The whole profiler configuration of a run, as every process sees it."""

    global_: GlobalConfig
    roles: Mapping[str, RoleConfig]
    agent_loop: bool = False
    """Rollout runs in agent-loop mode (``actor_rollout_ref.rollout.mode: async``): its ``ranks``
    count replica ranks."""
    warnings: tuple[str, ...] = ()
    """Deprecations and suspicious-but-valid settings found while loading."""
    source: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The profiler sections after legacy migration, in today's keys and verl's layout: what
    ``rlprof check --migrate`` prints, and what ``load_config(config, overrides)`` re-reads."""

    @property
    def enabled(self) -> bool:
        """Profiling is on at all: a tool and steps are set and some role is enabled."""
        steps = self.global_.steps or self.global_.caller_steps
        return bool(self.global_.tools and steps and any(r.enable for r in self.roles.values()))

    def with_overrides(self, **global_changes: Any) -> "ProfilerConfig":
        """A copy with ``global_profiler`` fields changed (``save_path=...``, ``caller_steps=True``);
        the change is kept in :attr:`source` too, so later dotted overrides build on it."""
        source = dict(self.source)
        section = dict(source.get("global_profiler") or {})
        for key, value in global_changes.items():
            name = "tool" if key == "tools" else key
            if name in GLOBAL_KEYS:
                section[name] = list(value) if isinstance(value, tuple) else value
        source["global_profiler"] = section
        return replace(self, global_=replace(self.global_, **global_changes), source=source)


# ----------------------------------------------------------------------------------- loading


def load_config(source: Any = None, overrides: Iterable[str] = ()) -> ProfilerConfig:
    """Read a configuration from a YAML path, a mapping or a ``DictConfig``, apply dotted overrides.

    :raises ConfigError: for anything wrong, naming the key path, the value and what is allowed.
    """
    if isinstance(source, ProfilerConfig):
        if not overrides:
            return source
        # re-read its verl-layout source with the overrides; keep what YAML cannot say
        reloaded = load_config(dict(source.source), overrides)
        return reloaded.with_overrides(caller_steps=source.global_.caller_steps)
    from omegaconf import OmegaConf  # imported here: keeps ``import rlprof`` light

    from rlprof.config.sources import apply_overrides, read_source

    root = apply_overrides(read_source(source, OmegaConf), overrides, OmegaConf)
    raw = _relevant_sections(root, OmegaConf)
    check_tree(raw, "")
    raw, warnings = migrate(raw)
    return parse(raw, warnings=warnings)


_LEGACY_SELECTIONS = (
    "trainer.profile_steps",
    "trainer.npu_profile",
    "npu_profile",
    "actor_rollout_ref.profiler",
    "actor_rollout_ref.critic",
    "actor_rollout_ref.rm",
)
_LEGACY_ROLE_KEYS = ("profile_ranks", "profile_ranks_all", "profile_discrete")


def _relevant_sections(root, OmegaConf) -> dict[str, Any]:
    """Pull the profiler sections out of a whole trainer config, interpolations resolved.

    Every read of the tree is guarded: an interpolation that cannot be resolved (``critic: ${nope}``),
    a malformed one (``${}``) or a self-reference is a ConfigError naming the key path it was read at.
    """

    def select(path: str, *, resolve: bool = True) -> Any:
        try:
            node = OmegaConf.select(root, path, default=_ABSENT, throw_on_missing=False)
            if node is _ABSENT:
                return _ABSENT
            if OmegaConf.is_config(node):
                return OmegaConf.to_container(node, resolve=resolve) if resolve else node
            return node
        except Exception as exc:  # omegaconf's interpolation/grammar errors, RecursionError of a cycle
            raise ConfigError(f"{path}: cannot be resolved: {_first_line(exc)}; allowed: values or interpolations "
                              "(${...}) that point at existing keys", key=path) from None

    raw: dict[str, Any] = {}
    for key in _keys(root, "", OmegaConf):
        if isinstance(key, str) and key != "global_profiler" and difflib.get_close_matches(key, ["global_profiler"], n=1, cutoff=0.85):
            raise ConfigError(f"{key}: unknown top-level section{did_you_mean(key, ['global_profiler'])}", key=key)
    value = select("global_profiler")
    if value is not _ABSENT:
        raw["global_profiler"] = value
    for role, path in ROLE_PATHS.items():
        section = select(path, resolve=False)
        if section is _ABSENT or not OmegaConf.is_dict(section):
            continue
        for key in _keys(section, path, OmegaConf):
            if (isinstance(key, str) and key != "profiler" and key not in _LEGACY_ROLE_KEYS
                    and difflib.get_close_matches(key, ["profiler"], n=1, cutoff=0.85)):
                raise ConfigError(f"{path}.{key}: unknown key (did you mean 'profiler'?)", key=f"{path}.{key}")
        entry: dict[str, Any] = {}
        prof = select(f"{path}.profiler")
        if prof is not _ABSENT:
            entry["profiler"] = prof
        for legacy_key in _LEGACY_ROLE_KEYS:
            legacy_value = select(f"{path}.{legacy_key}")
            if legacy_value is not _ABSENT:
                entry[legacy_key] = legacy_value
        if entry:
            raw.setdefault("roles", {})[role] = entry
    mode = select("actor_rollout_ref.rollout.mode")
    if mode is not _ABSENT:
        raw["rollout_mode"] = mode
    for path in _LEGACY_SELECTIONS:
        legacy = select(path)
        if legacy is not _ABSENT:
            raw.setdefault("legacy", {})[path] = legacy
    return raw


def _keys(node, path: str, OmegaConf) -> list[Any]:
    """The keys of a DictConfig node, or [] for anything else (a list, a scalar, an interpolation)."""
    try:
        return list(node.keys()) if OmegaConf.is_dict(node) else []
    except Exception as exc:
        raise ConfigError(f"{path or 'config'}: cannot be read: {_first_line(exc)}", key=path or None) from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


# ----------------------------------------------------------------------------------- parsing


def parse(raw: Mapping[str, Any], *, warnings: Iterable[str] = ()) -> ProfilerConfig:
    """Type the (already migrated) profiler sections. Pure: no I/O, no imports of backends."""
    warnings = list(warnings)
    g_raw = raw.get("global_profiler") or {}
    if not isinstance(g_raw, Mapping):
        raise fail("global_profiler", g_raw, "a mapping of tool, steps, save_path, ...")
    for key in g_raw:
        if key not in GLOBAL_KEYS:
            raise unknown_key("global_profiler", key, GLOBAL_KEYS)
    tools = parse_tools(g_raw.get("tool"), "global_profiler.tool")
    steps = parse_steps(g_raw.get("steps"), "global_profiler.steps")
    save_path = parse_save_path(g_raw.get("save_path"))
    continuous = parse_bool(g_raw, "profile_continuous_steps", "global_profiler")
    gtc = g_raw.get("global_tool_config") or {}
    if not isinstance(gtc, Mapping):
        raise fail("global_profiler.global_tool_config", gtc, "a mapping from tool name to its settings")
    known_tools = set(VERL_TOOLS) | set(tools) | installed_backend_names()
    for name, section in gtc.items():
        if name not in known_tools:
            raise unknown_key("global_profiler.global_tool_config", name, known_tools)
        if section is not None and not isinstance(section, Mapping):
            raise fail(f"global_profiler.global_tool_config.{name}", section, "a mapping")
        _warn_unselected_tool(f"global_profiler.global_tool_config.{name}", name, section, tools, warnings)
    hook_cmd = g_raw.get("finish_hook_cmd")
    if hook_cmd is not None and not isinstance(hook_cmd, str):
        raise fail("global_profiler.finish_hook_cmd", hook_cmd, "a shell command string or null")
    hook_ranks_raw = g_raw.get("finish_hook_ranks")
    hook_ranks = None if hook_ranks_raw in (None, []) else parse_ranks(hook_ranks_raw, "global_profiler.finish_hook_ranks")
    global_ = GlobalConfig(
        tools=tools,
        steps=steps,
        save_path=save_path,
        profile_continuous_steps=continuous,
        global_tool_config={k: dict(v or {}) for k, v in gtc.items()},
        relocate_results=parse_bool(g_raw, "relocate_results", "global_profiler"),
        finish_hook_cmd=hook_cmd or None,
        finish_hook_all_ranks=parse_bool(g_raw, "finish_hook_all_ranks", "global_profiler"),
        finish_hook_ranks=hook_ranks,
    )

    roles_raw = raw.get("roles") or {}
    roles: dict[str, RoleConfig] = {}
    for role in ROLES:
        entry = roles_raw.get(role) or {}
        section = entry.get("profiler", _ABSENT)
        if section is _ABSENT or section is None:
            continue
        roles[role] = _parse_role(role, profiler_path(role), section, global_, known_tools, warnings)
    followers = [role for role in FOLLOWS_ACTOR if role not in roles and "actor" in roles]
    for role in followers:
        roles[role] = replace(roles["actor"], name=role, follows="actor")
    for role in ROLES:
        roles.setdefault(role, RoleConfig(name=role, key_path=profiler_path(role)))

    mode = raw.get("rollout_mode")
    agent_loop = mode == "async"
    rollout = roles["rollout"]
    if agent_loop and rollout.enable and not rollout.discrete:
        # The guide: in agent-loop mode rollout "must be collected using discrete mode" (the inference
        # engine triggers it per generate call). verl's composed config makes rollout follow the actor,
        # so an end-to-end actor would otherwise make every agent-loop config invalid.
        roles["rollout"] = replace(rollout, discrete=True)
        if global_.tools and steps:
            warnings.append(
                f"{rollout.key_path}: rollout runs in agent-loop mode (actor_rollout_ref.rollout.mode=async), where it is "
                "always profiled in discrete mode, one capture per generate call; its ranks count replica ranks"
            )
    if continuous and any(r.discrete and r.enable for r in roles.values()):
        names = [r.name for r in roles.values() if r.discrete and r.enable]
        raise ConfigError(
            "global_profiler.profile_continuous_steps: got True together with discrete mode for "
            f"{', '.join(names)}; allowed: continuous steps merge whole steps into one capture, which only exists in "
            "end-to-end mode: set discrete=false or profile_continuous_steps=false",
            key="global_profiler.profile_continuous_steps",
        )
    # One warning per section the user wrote: roles that follow the actor share its warnings.
    also = " (rollout and ref follow it)" if len(followers) == 2 else f" ({followers[0]} follows it)" if followers else ""
    for r in roles.values():
        if r.follows:
            continue
        suffix = also if r.name == "actor" else ""
        if r.enable and not r.all_ranks and not r.ranks and tools and steps:
            warnings.append(f"{r.key_path}: enable=true but ranks=[] and all_ranks=false: this role collects nothing "
                            f"(set ranks or all_ranks=true){suffix}")
        if r.enable and r.schedule is not None and not r.discrete and tools and steps:
            warnings.append(
                f"{r.key_path}.schedule: in end-to-end mode a schedule narrows the role's ranges to the sampled "
                f"iterations but the step capture still holds the whole step; use discrete mode to shrink the capture{suffix}"
            )
    if not tools:
        _hint_how_to_switch_on(roles_raw, roles, global_, warnings)
    return ProfilerConfig(global_=global_, roles=roles, agent_loop=agent_loop, warnings=tuple(dict.fromkeys(warnings)),
                          source=to_verl_layout(dict(raw)))


def _hint_how_to_switch_on(roles_raw: Mapping[str, Any], roles: Mapping[str, RoleConfig], global_: GlobalConfig,
                           warnings: list[str]) -> None:
    """Profiling is off for want of a tool, but the config says which tool it was written for
    (a guide's example with ``tool_config.npu`` and no ``tool``): say how to switch it on."""
    wanted: dict[str, None] = {}
    for entry in roles_raw.values():
        section = entry.get("profiler") if isinstance(entry, Mapping) else None
        tool_config = section.get("tool_config") if isinstance(section, Mapping) else None
        for tool, tool_section in (tool_config or {}).items():
            if _set_keys(tool, tool_section):
                wanted.setdefault(tool)
    for tool, section in global_.global_tool_config.items():
        if _set_keys(tool, section):
            wanted.setdefault(tool)
    enabled = any(r.enable for r in roles.values())
    if wanted and (enabled or global_.steps):
        names = list(wanted)
        switch = f"global_profiler.tool={names[0]}" if len(names) == 1 else f"global_profiler.tool=[{','.join(names)}]"
        warnings.append(f"profiling is off because global_profiler.tool is not set, but tool_config.{names[0]} is: "
                        f"set {switch} to profile with it" + ("" if global_.steps else " (and global_profiler.steps)"))


def _set_keys(tool: str, section: Mapping[str, Any] | None) -> list[str]:
    """The keys of a tool section whose values differ from what verl writes by default."""
    defaults = VERL_TOOL_DEFAULTS.get(tool, {})
    out = []
    for key, value in (section or {}).items():
        if key in _VERL_BOOKKEEPING or value is None:
            continue
        if key in defaults and _same(value, defaults[key]):
            continue
        out.append(key)
    return out


def _same(value: Any, default: Any) -> bool:
    if isinstance(default, Mapping) and isinstance(value, Mapping):
        return all(_same(value.get(k), default.get(k)) for k in set(value) | set(default) if k not in _VERL_BOOKKEEPING)
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default) and value == default
    return value == default


def _warn_unselected_tool(path: str, tool: str, section: Any, tools: tuple[str, ...], warnings: list[str]) -> None:
    """A ``tool_config.<tool>`` section with settings for a tool that is not selected is ignored: say so."""
    if not tools or tool in tools or not isinstance(section, Mapping):
        return
    keys = _set_keys(tool, section)
    if keys:
        shown = ", ".join(f"{k}={_show(section[k])}" for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
        warnings.append(f"{path}: sets {shown} but {tool} is not a selected tool (global_profiler.tool={_show(list(tools))}): "
                        f"ignored; add {tool} to global_profiler.tool to use it")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_role(role: str, path: str, section: Any, global_: GlobalConfig, known_tools: set[str], warnings: list[str]) -> RoleConfig:
    if not isinstance(section, Mapping):
        raise fail(path, section, "a mapping with enable, all_ranks, ranks, tool_config")
    for key in section:
        if key not in ROLE_KEYS:
            raise unknown_key(path, key, ROLE_KEYS)
    enable = parse_bool(section, "enable", path)
    all_ranks = parse_bool(section, "all_ranks", path)
    ranks = parse_ranks(section.get("ranks"), f"{path}.ranks")
    if isinstance(section.get("ranks"), str):
        warnings.append(f"{path}.ranks: got the string {section['ranks']!r}; read as the list {list(ranks)} (write a YAML list, e.g. [0, 1])")
    role_tool = section.get("tool")
    if role_tool not in (None, "") and parse_tools(role_tool, f"{path}.tool") != global_.tools and global_.tools:
        warnings.append(f"{path}.tool={role_tool!r} differs from global_profiler.tool={list(global_.tools)}: rlprof uses global_profiler.tool for every role")
    tc_raw = section.get("tool_config") or {}
    if not isinstance(tc_raw, Mapping):
        raise fail(f"{path}.tool_config", tc_raw, "a mapping from tool name to its settings")
    for name, sub in tc_raw.items():
        if name not in known_tools:
            raise unknown_key(f"{path}.tool_config", name, known_tools)
        if sub is not None and not isinstance(sub, Mapping):
            raise fail(f"{path}.tool_config.{name}", sub, "a mapping")
        _warn_unselected_tool(f"{path}.tool_config.{name}", name, sub, global_.tools, warnings)

    discrete_votes: dict[str, bool] = {}
    if section.get("discrete") is not None:
        discrete_votes[f"{path}.discrete"] = parse_bool(section, "discrete", path)
    schedules: dict[str, Schedule | None] = {}
    if section.get("schedule") is not None:
        schedules[f"{path}.schedule"] = parse_schedule(section["schedule"], f"{path}.schedule")
    merged: dict[str, dict[str, Any]] = {}
    for tool in sorted(set(tc_raw) | set(global_.global_tool_config)):
        combined = dict(global_.global_tool_config.get(tool) or {})
        combined.update(tc_raw.get(tool) or {})
        key = f"{path}.tool_config.{tool}"
        if tool in global_.tools:
            if combined.get("discrete") is not None:
                discrete_votes[f"{key}.discrete"] = parse_bool(combined, "discrete", key)
            if combined.get("schedule") is not None:
                schedules[f"{key}.schedule"] = parse_schedule(combined["schedule"], f"{key}.schedule", default_repeat=0)
            window = token_window(combined.get("profile_token_start"), combined.get("profile_token_end"), key)
            if window is not None:
                schedules[f"{key}.profile_token_start/end"] = window
        merged[tool] = {k: v for k, v in combined.items() if k not in CORE_TOOL_KEYS}
    if len(set(discrete_votes.values())) > 1:
        raise ConfigError(
            f"{path}: discrete disagrees between {', '.join(f'{k}={v}' for k, v in discrete_votes.items())}; "
            "allowed: one mode per role: set them all to true or all to false",
            key=path,
        )
    active_schedules = {k: v for k, v in schedules.items() if v is not None}
    if len(set(active_schedules.values())) > 1:
        raise ConfigError(
            f"{path}: sampling schedules disagree: {', '.join(f'{k}={v}' for k, v in active_schedules.items())}; allowed: set it in one place",
            key=path,
        )
    return RoleConfig(
        name=role,
        key_path=path,
        enable=enable,
        all_ranks=all_ranks,
        ranks=ranks,
        discrete=next(iter(discrete_votes.values()), False),
        schedule=next(iter(active_schedules.values()), None),
        tool_config=merged,
    )


def installed_backend_names() -> set[str]:
    """Names in the ``rlprof.backends`` entry-point group (metadata only, nothing imported)."""
    from rlprof.installed import discover

    return set(discover())
