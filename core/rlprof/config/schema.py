"""verl-compatible profiler configuration: read it from anywhere, check it, type it.

Accepts what verl users already have: a YAML file, a dict, an OmegaConf ``DictConfig`` (what
verl hands its workers), dotted overrides (``global_profiler.steps=[1,2]``), or any mix, overrides
winning. Only the profiler sections are read (``global_profiler``, each role's ``profiler``, and the
legacy keys of older guides, see :mod:`rlprof.config.legacy`); the rest of a trainer config is left alone,
so a full ``_generated_ppo_trainer.yaml`` with unresolved ``???`` values elsewhere still loads.

Every key is declared once, documented, in :mod:`rlprof.config.sections` (why stdlib dataclasses:
see there); this module reads the sections through those declarations and adds the checks that span
keys. Inside the profiler sections every key verl defines is understood or knowingly ignored; any
other key is a :class:`ConfigError` with a did-you-mean.

What a loaded :class:`ProfilerConfig` guarantees to the code that reads it: every tool section it
holds (``roles[name].tool_config.<tool>`` and ``global_.global_tool_config.<tool>``) is a plain dict
without the core's keys (:data:`CORE_TOOL_KEYS`: ``discrete``, ``schedule``, ``profile_token_start/end``,
``_target_``), which are resolved into ``RoleConfig.discrete`` / ``.schedule``; a backend's
``validate_tool_config`` can be handed any of them as it is.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from rlprof.errors import ConfigError, ErrorList, did_you_mean, fail, unknown_key  # noqa: F401  (fail: rlprof.config.fail)
from rlprof.config.fields import read_section, recorded_values, shape, string_keys, yaml_name
from rlprof.config.legacy import LEGACY_ROLE_KEYS, LEGACY_SELECTIONS, migrate, to_verl_layout
from rlprof.config.sections import (CORE_TOOL_KEYS, EVERY_RANK_TOOLS, GLOBAL_KEYS, ROLE_KEYS,  # noqa: F401  (re-exported)
                                    VERL_TOOLS, GlobalConfig, RoleConfig)
from rlprof.config.unselected import hint_how_to_switch_on, warn_unselected_tool, written_by_verl
from rlprof.roles import FOLLOWS_ACTOR, ROLE_PATHS, ROLES, profiler_path  # noqa: F401  (re-exported: older imports)
from rlprof.config.schedule import Schedule, parse_schedule, token_window
from rlprof.config.values import DEFAULT_SAVE_PATH, parse_ranks, parse_save_path, parse_steps, parse_tools  # noqa: F401
from rlprof.tool_config import parse_bool


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
    gpus_per_replica: int | None = None
    """GPUs of one rollout replica, when the trainer config says it (:func:`gpus_per_replica`): lets
    ``rlprof check`` count the replicas of a world of GPUs and name the replica that holds a global
    GPU rank written where a replica rank belongs."""

    @property
    def capture_budget_given(self) -> bool:
        """``global_profiler.capture_budget_mb`` was set (not left to its default), whatever its value: a
        budget the user chose is held exactly (:class:`rlprof.runtime.budget.CaptureBudget`)."""
        section = self.source.get("global_profiler")
        return isinstance(section, Mapping) and section.get("capture_budget_mb") is not None

    def recorded(self) -> dict[str, Any]:
        """The ``global_profiler`` keys declared ``recorded`` (:func:`~rlprof.config.fields.key`), by YAML name,
        as plain values: what every process writes in its ``process`` record."""
        return recorded_values(self.global_)

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
            name = yaml_name(GlobalConfig, key)
            if name is not None:  # a key YAML can say (caller_steps is not one)
                section[name] = list(value) if isinstance(value, tuple) else value
        source["global_profiler"] = section
        return replace(self, global_=replace(self.global_, **global_changes), source=source)


# ----------------------------------------------------------------------------------- loading


def load_config(source: Any = None, overrides: Iterable[str] = ()) -> ProfilerConfig:
    """Read a configuration from a YAML path, a mapping or a ``DictConfig``, apply dotted overrides.

    The input's size is checked once, where it enters (:func:`~rlprof.config.sources.read_source`,
    each override's value); a loaded :class:`ProfilerConfig` given again with overrides starts from
    its :attr:`~ProfilerConfig.source`, already checked and migrated, and is not read again.

    :raises ConfigError: for anything wrong, naming the key path, the value and what is allowed;
        several independent mistakes as one :class:`~rlprof.errors.ConfigErrors` listing each.
    """
    errors = ErrorList()
    config = read_config(source, overrides, errors)
    errors.raise_if_any()
    return config


def read_config(source: Any, overrides: Iterable[str], errors: ErrorList) -> ProfilerConfig | None:
    """:func:`load_config` that puts every mistake in ``errors`` instead of raising: for ``rlprof check``,
    which goes on to check ranks and backends so that it can list every independent mistake at once.

    Returns None when the input cannot be read at all (a file that is not YAML, a bad override, a
    legacy key of the wrong shape); otherwise the configuration as far as it could be read, every bad
    key at its default: only fit for further checking while ``errors`` is not empty, never for a run."""
    if isinstance(source, ProfilerConfig) and not overrides:
        return source
    from omegaconf import OmegaConf  # imported here: keeps ``import rlprof`` light

    from rlprof.config.sources import apply_overrides, read_source

    def read() -> ProfilerConfig:
        if isinstance(source, ProfilerConfig):
            # its verl-layout source, built by rlprof from checked input: only the overrides are new
            root = apply_overrides(OmegaConf.create(dict(source.source)), overrides, OmegaConf)
            return _read(root, OmegaConf, errors).with_overrides(caller_steps=source.global_.caller_steps)  # what YAML cannot say
        return _read(apply_overrides(read_source(source, OmegaConf), overrides, OmegaConf), OmegaConf, errors)

    return errors.attempt(read)


def _read(root: Any, OmegaConf, errors: ErrorList) -> ProfilerConfig:
    """The configuration in ``root`` (a whole trainer config as a DictConfig, overrides applied)."""
    raw, warnings = migrate(_relevant_sections(root, OmegaConf, errors))
    return parse(raw, installed=installed_backend_names(), warnings=warnings, errors=errors)


def _relevant_sections(root, OmegaConf, errors: ErrorList) -> dict[str, Any]:
    """Pull the profiler sections out of a whole trainer config, interpolations resolved.

    A section name one typo away from ``global_profiler`` (or a role's ``profiler``) goes to ``errors``
    and the rest is read on.

    Every read of the tree is guarded: an interpolation that cannot be resolved (``critic: ${nope}``),
    a malformed one (``${}``) or a self-reference is a ConfigError naming the key path it was read at.
    Every key that is not a string in a section read, at any depth, goes to ``errors`` and is left out
    (:func:`~rlprof.config.fields.string_keys`); keys outside these sections are the trainer's.
    """

    def select(path: str, *, resolve: bool = True) -> Any:
        try:
            node = OmegaConf.select(root, path, default=_ABSENT, throw_on_missing=False)
            if node is _ABSENT or not OmegaConf.is_config(node):
                return node
            if not resolve:
                return node
            value = OmegaConf.to_container(node, resolve=True)
        except Exception as exc:  # omegaconf's interpolation/grammar errors, RecursionError of a cycle
            raise ConfigError(f"{path}: cannot be resolved: {_first_line(exc)}; allowed: values or interpolations "
                              "(${...}) that point at existing keys", key=path) from None
        value, bad_keys = string_keys(value, path)  # every section read goes through here
        for error in bad_keys:
            errors.add(error)
        return value

    raw: dict[str, Any] = {}
    for key in _keys(root, "", OmegaConf):
        if isinstance(key, str) and key != "global_profiler" and difflib.get_close_matches(key, ["global_profiler"], n=1, cutoff=0.85):
            errors.add(ConfigError(f"{key}: unknown top-level section{did_you_mean(key, ['global_profiler'])}", key=key,
                                   value=key, allowed="global_profiler"))
    value = select("global_profiler")
    if value is not _ABSENT:
        raw["global_profiler"] = value
    for role, path in ROLE_PATHS.items():
        section = select(path, resolve=False)
        if section is _ABSENT or not OmegaConf.is_dict(section):
            continue
        for key in _keys(section, path, OmegaConf):
            if (isinstance(key, str) and key != "profiler" and key not in LEGACY_ROLE_KEYS
                    and difflib.get_close_matches(key, ["profiler"], n=1, cutoff=0.85)):
                errors.add(ConfigError(f"{path}.{key}: unknown key (did you mean 'profiler'?)", key=f"{path}.{key}",
                                       value=key, allowed="profiler"))
        entry: dict[str, Any] = {}
        prof = select(f"{path}.profiler")
        if prof is not _ABSENT:
            entry["profiler"] = prof
        for legacy_key in LEGACY_ROLE_KEYS:
            legacy_value = select(f"{path}.{legacy_key}")
            if legacy_value is not _ABSENT:
                entry[legacy_key] = legacy_value
        if entry:
            raw.setdefault("roles", {})[role] = entry
    mode = select("actor_rollout_ref.rollout.mode")
    if mode is not _ABSENT:
        raw["rollout_mode"] = mode
    parallel = {key: select(f"actor_rollout_ref.rollout.{key}") for key in ROLLOUT_PARALLEL_KEYS}
    if any(value is not _ABSENT for value in parallel.values()):
        raw["rollout_parallel"] = {key: value for key, value in parallel.items() if value is not _ABSENT}
    for path in LEGACY_SELECTIONS:
        legacy = select(path)
        if legacy is not _ABSENT:
            raw.setdefault("legacy", {})[path] = legacy
    return raw


ROLLOUT_PARALLEL_KEYS = ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")
"""verl's rollout keys whose product is a replica's GPUs (``actor_rollout_ref.rollout.<key>``)."""


def gpus_per_replica(sizes: Mapping[str, Any] | None) -> int | None:
    """The product of verl's rollout parallel sizes (a missing one counts 1, as verl's default), or
    None when none is given or one is not a positive whole number (verl's to refuse, not ours)."""
    if not sizes:
        return None
    product = 1
    for value in sizes.values():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return None
        product *= value
    return product


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


def parse(raw: Mapping[str, Any], *, installed: Iterable[str], warnings: Iterable[str] = (),
          errors: ErrorList | None = None) -> ProfilerConfig:
    """Type the (already migrated) profiler sections. Pure: no I/O, no imports of backends; the
    names of the installed backends (``installed``) are the caller's to find
    (:func:`installed_backend_names`).

    Each section's keys are read through their declarations (:func:`~rlprof.config.fields.read_section`);
    what spans keys is checked here: tool names in ``tool_config`` mappings, discrete and sampling
    written in several places, agent-loop rollout, continuous steps with discrete mode.

    Every independent mistake is found, not only the first: without ``errors`` they are raised
    together at the end (:class:`~rlprof.errors.ConfigErrors` when several); with it they are put
    there and the configuration as far as it could be read is returned (a bad key at its default;
    a role whose mode could not be read disabled, so that no later check trips over it again).
    A check that depends on a key already found bad is left out (tool names when ``tool`` is bad)."""
    if errors is None:
        errors = ErrorList()
        config = parse(raw, installed=installed, warnings=warnings, errors=errors)
        errors.raise_if_any()
        return config
    warnings = list(warnings)
    g_raw = raw.get("global_profiler") or {}
    tools_read = isinstance(g_raw, Mapping)
    if not tools_read:
        errors.add(fail("global_profiler", g_raw, shape(GlobalConfig)))
        g_raw = {}
    values = read_section(GlobalConfig, g_raw, "global_profiler", GLOBAL_KEYS, errors)
    tools_read = tools_read and not errors.has("global_profiler.tool")
    tools, steps, continuous = values["tools"], values["steps"], values["profile_continuous_steps"]
    global_sections = values["global_tool_config"]  # as written: the roles merge it, core keys and all
    global_generated = written_by_verl(g_raw)
    installed = set(installed)
    known_tools = set(VERL_TOOLS) | set(tools) | installed if tools_read else None
    _check_tool_sections("global_profiler.global_tool_config", global_sections, tools, known_tools, warnings,
                         errors, generated=global_generated)
    global_ = GlobalConfig(**{**values, "global_tool_config": {t: _backend_keys(s) for t, s in global_sections.items()}})

    roles_raw = raw.get("roles") or {}
    roles: dict[str, RoleConfig] = {}
    written: dict[str, tuple[Mapping[str, Any], bool]] = {}
    for role in ROLES:
        entry = roles_raw.get(role) or {}
        section = entry.get("profiler", _ABSENT)
        if section is _ABSENT or section is None:
            continue
        roles[role], written[role] = _parse_role(role, profiler_path(role), section, global_, global_sections,
                                                 known_tools, warnings, errors)
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
        errors.add(ConfigError(
            "global_profiler.profile_continuous_steps: got True together with discrete mode for "
            f"{', '.join(names)}; allowed: continuous steps merge whole steps into one capture, which only exists in "
            "end-to-end mode: set discrete=false or profile_continuous_steps=false",
            key="global_profiler.profile_continuous_steps", value=True,
            allowed="false while a role profiles in discrete mode",
        ))
    # One warning per section the user wrote: roles that follow the actor share its warnings.
    also = " (rollout and ref follow it)" if len(followers) == 2 else f" ({followers[0]} follows it)" if followers else ""
    for r in roles.values():
        if r.follows:
            continue
        suffix = also if r.name == "actor" else ""
        if tools and steps and r.collects_nothing(tools):
            warnings.append(f"{r.key_path}: enable=true but ranks=[] and all_ranks=false: this role collects nothing "
                            f"(set ranks or all_ranks=true){suffix}")
        if r.enable and r.schedule is not None and not r.discrete and tools and steps:
            warnings.append(
                f"{r.key_path}.schedule: in end-to-end mode a schedule narrows the role's ranges to the sampled "
                f"iterations but the step capture still holds the whole step; use discrete mode to shrink the capture{suffix}"
            )
    if not tools:
        sections = [written[role] for role in roles_raw if role in written] + [(global_sections, global_generated)]
        hint_how_to_switch_on(sections, enabled=any(r.enable for r in roles.values()), steps=global_.steps,
                              warnings=warnings)
    return ProfilerConfig(global_=global_, roles=roles, agent_loop=agent_loop, warnings=tuple(dict.fromkeys(warnings)),
                          source=to_verl_layout(dict(raw)), gpus_per_replica=gpus_per_replica(raw.get("rollout_parallel")))


def _check_tool_sections(path: str, sections: Mapping[str, Mapping[str, Any]], tools: tuple[str, ...],
                         known_tools: set[str] | None, warnings: list[str], errors: ErrorList, *,
                         generated: bool) -> None:
    """Each tool named in a ``tool_config`` mapping is one verl defines, a selected or an installed one;
    settings for a tool that is not selected are ignored, with a warning. Not checked when the
    known tools are not known (``None``: ``global_profiler`` itself was bad)."""
    if known_tools is None:
        return
    for name, section in sections.items():
        if name not in known_tools:
            errors.add(unknown_key(path, name, known_tools))
        else:
            warn_unselected_tool(f"{path}.{name}", name, section, tools, warnings, generated=generated)


def _backend_keys(section: Mapping[str, Any]) -> dict[str, Any]:
    """A tool section without the core's keys (:data:`CORE_TOOL_KEYS`): what its backend is handed."""
    return {k: v for k, v in section.items() if k not in CORE_TOOL_KEYS}


def _parse_role(role: str, path: str, section: Any, global_: GlobalConfig, global_sections: Mapping[str, Mapping[str, Any]],
                known_tools: set[str] | None, warnings: list[str],
                errors: ErrorList) -> tuple[RoleConfig, tuple[Mapping[str, Any], bool]]:
    """The role's :class:`RoleConfig`, and its ``tool_config`` as written with whether verl generated it.

    Mistakes go to ``errors``; a role whose mode (discrete, schedule) could not be settled is
    returned disabled, so that the plan does not report it again as a disagreement."""
    if not isinstance(section, Mapping):
        errors.add(fail(path, section, shape(RoleConfig)))
        return RoleConfig(name=role, key_path=path), ({}, False)
    values = read_section(RoleConfig, section, path, ROLE_KEYS, errors)
    if isinstance(section.get("ranks"), str) and not errors.has(f"{path}.ranks"):
        warnings.append(f"{path}.ranks: got the string {section['ranks']!r}; read as the list {list(values['ranks'])} "
                        "(write a YAML list, e.g. [0, 1])")
    role_tool = section.get("tool")
    role_tools = errors.attempt(parse_tools, role_tool, f"{path}.tool", default=())
    if role_tools and role_tools != global_.tools and global_.tools:
        warnings.append(f"{path}.tool={role_tool!r} differs from global_profiler.tool={list(global_.tools)}: rlprof uses global_profiler.tool for every role")
    own_sections = values["tool_config"]
    generated = written_by_verl(section)
    _check_tool_sections(f"{path}.tool_config", own_sections, global_.tools, known_tools, warnings, errors,
                         generated=generated)
    mode = errors.attempt(_role_mode, path, section, values, global_, global_sections)
    if mode is None or errors.has(f"{path}.discrete") or errors.has(f"{path}.schedule"):
        unsettled = dict(values, enable=False, discrete=False, schedule=None,
                         tool_config={t: _backend_keys(s) for t, s in own_sections.items()})
        return RoleConfig(name=role, key_path=path, **unsettled), (own_sections, generated)
    discrete, schedule, merged = mode
    resolved = dict(values, discrete=discrete, schedule=schedule, tool_config=merged)
    return RoleConfig(name=role, key_path=path, **resolved), (own_sections, generated)


def _role_mode(path: str, section: Mapping[str, Any], values: Mapping[str, Any], global_: GlobalConfig,
               global_sections: Mapping[str, Mapping[str, Any]]) -> tuple[bool, Schedule | None, dict[str, dict[str, Any]]]:
    """The role's ``(discrete, schedule, tool sections for its backends)``.

    ``discrete`` and the sampling schedule may be written in the section itself and in the selected
    tools' sections (verl's ``tool_config.<tool>.discrete``, ``tool_config.torch.schedule``, rollout's
    ``profile_token_start/end``, each also under ``global_tool_config``): every place that says
    something must agree; ``global_profiler.discrete`` applies only where none says anything (a
    ``discrete: false`` in a tool section verl generated is verl's default, not a say). A bad value is
    named where it is written (the role's tool section, or ``global_tool_config``'s)."""
    own_sections = values["tool_config"]
    discrete_votes: dict[str, bool] = {}
    if section.get("discrete") is not None:
        discrete_votes[f"{path}.discrete"] = values["discrete"]
    schedules: dict[str, Schedule | None] = {}
    if section.get("schedule") is not None:
        schedules[f"{path}.schedule"] = values["schedule"]
    merged: dict[str, dict[str, Any]] = {}
    for tool in sorted(set(own_sections) | set(global_sections)):
        combined = dict(global_sections.get(tool) or {})
        combined.update(own_sections.get(tool) or {})
        key = f"{path}.tool_config.{tool}"

        def written_at(name: str) -> str:
            in_role = name in (own_sections.get(tool) or {})
            return f"{key}.{name}" if in_role else f"global_profiler.global_tool_config.{tool}.{name}"

        if tool in global_.tools:
            if combined.get("discrete") is not None:
                vote = parse_bool(combined["discrete"], written_at("discrete"))
                # verl's generated tool sections say discrete: false by default: not a choice that
                # outvotes global_profiler.discrete (true is never verl's default, so it is one)
                if vote or global_.discrete is None or not written_by_verl(combined):
                    discrete_votes[f"{key}.discrete"] = vote
            if combined.get("schedule") is not None:
                schedules[f"{key}.schedule"] = parse_schedule(combined["schedule"], written_at("schedule"), default_repeat=0)
            window = token_window(combined.get("profile_token_start"), combined.get("profile_token_end"), key)
            if window is not None:
                schedules[f"{key}.profile_token_start/end"] = window
        merged[tool] = _backend_keys(combined)
    if len(set(discrete_votes.values())) > 1:
        raise ConfigError(
            f"{path}: discrete disagrees between {', '.join(f'{k}={v}' for k, v in discrete_votes.items())}; "
            "allowed: one mode per role: set them all to true or all to false",
            key=path, allowed="one mode per role",
        )
    active_schedules = {k: v for k, v in schedules.items() if v is not None}
    if len(set(active_schedules.values())) > 1:
        raise ConfigError(
            f"{path}: sampling schedules disagree: {', '.join(f'{k}={v}' for k, v in active_schedules.items())}; allowed: set it in one place",
            key=path, allowed="one schedule per role, set in one place",
        )
    fallback = bool(global_.discrete)  # global_profiler.discrete: only where the role says nothing
    return next(iter(discrete_votes.values()), fallback), next(iter(active_schedules.values()), None), merged


def installed_backend_names() -> set[str]:
    """Names in the ``rlprof.backends`` entry-point group (metadata only, nothing imported)."""
    from rlprof.installed import discover

    return set(discover())
