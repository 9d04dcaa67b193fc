"""``rlprof check``: validate a configuration against the installed backends and show the plan.

The plan is resolved for every process of a verl-shaped job: on each rank one process hosting
actor+rollout+ref (the hybrid engine), one hosting critic and one hosting reward (or one process
per rank hosting ``--roles``); in agent-loop mode rollout replicas are separate processes. Backends validate their ``tool_config`` sections; a backend's
``check_environment`` problems (e.g. torch_npu not importable) are printed as warnings: the
configuration is still valid and training would run without that capture. The sections written for
an installed backend that is not selected are checked by that backend too: their mistakes are
warnings (:attr:`CheckResult.unselected`), said whether the configuration is valid or not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from rlprof.config.schema import ROLES, ProfilerConfig, read_config
from rlprof.config.sections import replica_not_captured
from rlprof.config.trigger import too_short
from rlprof.errors import ConfigError, ConfigErrors, ErrorList
from rlprof.runtime.plan import ProcessPlan, armed, resolve_plan

DEFAULT_GROUPS = (("actor", "rollout", "ref"), ("critic",), ("reward",))
AGENT_LOOP_GROUPS = (("actor", "ref"), ("rollout",), ("critic",), ("reward",))
"""In agent-loop mode rollout replicas are processes of their own, counted by replica rank."""


@dataclass(frozen=True)
class RankRanges:
    """A set of ranks as sorted inclusive ``(first, last)`` ranges: a world of 123 456 789 ranks
    costs two numbers, not a list. Iterating yields every rank (only for small sets, please)."""

    ranges: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, ranks: Iterable[int]) -> "RankRanges":
        out: list[list[int]] = []
        for r in sorted(set(ranks)):
            if out and r == out[-1][1] + 1:
                out[-1][1] = r
            else:
                out.append([r, r])
        return cls(tuple((a, b) for a, b in out))

    @classmethod
    def merge(cls, ranges: Iterable[tuple[int, int]]) -> "RankRanges":
        """Inclusive ranges (any order, touching or overlapping) as one sorted, merged set."""
        merged: list[list[int]] = []
        for a, b in sorted(ranges):
            if merged and a <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return RankRanges(tuple((a, b) for a, b in merged))

    def __len__(self) -> int:
        return sum(b - a + 1 for a, b in self.ranges)

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b + 1)

    def __contains__(self, rank: object) -> bool:
        return any(a <= rank <= b for a, b in self.ranges)  # type: ignore[operator]

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def __str__(self) -> str:
        """``0,2-3``"""
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.ranges)

    def as_json(self) -> list[list[int]]:
        return [[a, b] for a, b in self.ranges]


@dataclass(frozen=True)
class RankClass:
    """Ranks ``first..last`` of one group of co-hosted roles that resolve to the same plan; ``plan``
    is the one resolved for ``first`` (every other rank of the class decides the same)."""

    first: int
    last: int
    plan: ProcessPlan


@dataclass
class CheckResult:
    config: ProfilerConfig
    world_size: int
    classes: list[RankClass]
    """Every process of the job, as classes of ranks that resolve alike (see :func:`rank_classes`)."""
    environment: dict[str, list[str]] = field(default_factory=dict)
    validated: dict[str, dict[str, Any]] = field(default_factory=dict)
    unselected: list[str] = field(default_factory=list)
    """Mistakes in the tool sections of installed backends that are not selected, worded as warnings
    (:func:`check_unselected_sections`): ignored by this run, errors once the tool is selected."""
    train_steps: int | None = None
    """How many steps the run will train (``rlprof check --train-steps``), when given: a trigger that cannot fire
    in so few is warned of (:func:`~rlprof.config.trigger.too_short`)."""

    @property
    def plans(self) -> list[ProcessPlan]:
        """One resolved plan per class of ranks (all processes of a class decide the same)."""
        return [c.plan for c in self.classes]

    @property
    def warnings(self) -> list[str]:
        out = list(self.config.warnings)
        for backend, problems in self.environment.items():
            out.extend(f"backend {backend!r}: {p}" for p in problems)
        out.extend(self.unselected)
        short = too_short(self.config.global_.trigger, self.train_steps) if self.train_steps and armed(self.config) else None
        if short:
            out.append(short)
        return list(dict.fromkeys(out))

    def selection(self) -> dict[str, dict[str, Any]]:
        """{role: {"ranks": RankRanges, "mode": "e2e"|"discrete", "schedule": {...}|None}} over all processes."""
        out: dict[str, dict[str, Any]] = {}
        ranges: dict[str, list[tuple[int, int]]] = {}
        for cls in self.classes:
            plan = cls.plan
            for name, role in plan.roles.items():
                entry = out.setdefault(name, {"ranks": RankRanges(), "mode": None, "schedule": None})
                if role.selected:
                    ranges.setdefault(name, []).append((cls.first, cls.last))
                    entry["mode"] = "discrete" if plan.discrete else "e2e"
                    if role.schedule is not None:
                        entry["schedule"] = vars(role.schedule)
        for name, found in ranges.items():
            out[name]["ranks"] = RankRanges.merge(found)
        return out

    @property
    def not_captured(self) -> dict[str, str]:
        """Roles the plan selects that no selected tool can capture, with why (the region is still timed):
        rollout in agent-loop replicas when no engine profiler stands in for a selected tool
        (:func:`~rlprof.config.sections.replica_not_captured`, the replicas' own ``skip`` reason)."""
        why = replica_not_captured(self.config.global_.tools) if self.config.agent_loop else None
        rollout = self.selection().get("rollout")
        return {"rollout": why} if why and rollout and rollout["ranks"] else {}

    def as_dict(self) -> dict[str, Any]:
        """The plan as JSON data; ``ranks`` are inclusive ``[first, last]`` ranges."""
        g = self.config.global_
        roles = {name: dict(entry, ranks=entry["ranks"].as_json()) for name, entry in self.selection().items()}
        return {
            "tools": list(g.tools),
            "steps": list(g.steps) if g.steps else [],
            "save_path": g.save_path,
            "profile_continuous_steps": g.profile_continuous_steps,
            "world_size": self.world_size,
            "agent_loop": self.config.agent_loop,
            "roles": roles,
            "captures": [list(run) for run in (self.plans[0].runs if self.plans else ())],
            "not_captured": self.not_captured,
            **self.as_armed(),
            "warnings": self.warnings,
        }

    def render(self) -> str:
        """The plan for people (warnings are not part of it: :attr:`warnings`, printed to stderr)."""
        g = self.config.global_
        lines = []
        if not self.config.enabled:
            why = "no global_profiler.tool" if not g.tools else "global_profiler.steps is null" if not g.steps else "no role has profiler.enable=true"
            if armed(self.config):
                lines.append(f"nothing planned ({why}); the configuration is valid")
                return "\n".join(lines + self._arming_lines())
            lines.append(f"profiling is off ({why}); the configuration is valid")
            if g.tools and not g.on_demand and any(r.enable for r in self.config.roles.values()):
                lines.append("not armed: global_profiler.on_demand is false (rlprof capture and triggers capture nothing)")
            return "\n".join(lines)
        lines.append(f"tools: {', '.join(g.tools)}   steps: {list(g.steps)}   save_path: {g.save_path}   world size: {self.world_size}")
        if g.profile_continuous_steps:
            runs = self.plans[0].runs if self.plans else ()
            lines.append("captures merged over consecutive steps: " + ", ".join(f"{list(r)}" for r in runs))
        selection = self.selection()
        not_captured = self.not_captured
        for step in g.steps:
            lines.append(f"step {step}:")
            for name in ROLES:
                entry = selection.get(name)
                if entry is None:
                    continue
                if entry["ranks"]:
                    extra = ""
                    if entry["schedule"]:
                        s = entry["schedule"]
                        extra = f"  sampled: skip_first={s['skip_first']} wait={s['wait']} warmup={s['warmup']} active={s['active']} repeat={s['repeat']}"
                    counts = "replica ranks" if name == "rollout" and self.config.agent_loop else "ranks"
                    chosen_by = next((p.roles[name].every_rank for p in self.plans if name in p.roles), None)
                    if chosen_by is not None:
                        extra += f"  (every rank of the role: {chosen_by} follows verl, ranks/all_ranks not read)"
                    if name in not_captured:
                        extra += f"  (timed, not captured: {not_captured[name]})"
                    lines.append(f"  {name:<7} {entry['mode']:<9} {counts} {entry['ranks']}{extra}")
                else:
                    reason = next((p.roles[name].reason for p in self.plans if name in p.roles), "")
                    lines.append(f"  {name:<7} off       ({reason})")
        return "\n".join(lines + self._arming_lines())

    def as_armed(self) -> dict[str, Any]:
        """Whether the run is armed, and for which roles and ranks, as JSON data (``rlprof check --json``)."""
        g = self.config.global_
        trigger = g.trigger
        return {"armed": armed(self.config), "on_demand": g.on_demand,
                "armed_roles": {name: ranks.as_json() for name, ranks in self._armed_ranks().items()},
                "trigger": vars(trigger) if trigger is not None else None}

    def _armed_ranks(self) -> dict[str, RankRanges]:
        found: dict[str, list[tuple[int, int]]] = {}
        for cls in self.classes:
            for name in cls.plan.armed:
                found.setdefault(name, []).append((cls.first, cls.last))
        return {name: RankRanges.merge(ranges) for name, ranges in found.items()}

    def _arming_lines(self) -> list[str]:
        """What ``rlprof check`` says of ``on_demand`` and ``trigger``: whether the run is armed, who captures
        on request, and each trigger with its defaults (docs/captures.md, "Unplanned captures")."""
        g = self.config.global_
        if not armed(self.config):
            if g.tools and not g.on_demand:
                return ["not armed: global_profiler.on_demand is false (only global_profiler.steps are captured; "
                        "rlprof capture and triggers capture nothing)"]
            return []
        roles = ", ".join(f"{name} {'replica ranks' if name == 'rollout' and self.config.agent_loop else 'ranks'} {ranks}"
                          for name, ranks in self._armed_ranks().items()) or "no rank (no role selected on any rank)"
        lines = [f"armed (global_profiler.on_demand: true, a tool set, a role enabled): `rlprof capture "
                 f"{g.save_path}` captures the next steps of a running job on {roles}"]
        trigger = g.trigger
        if trigger is None:
            lines.append("no trigger (global_profiler.trigger: null): nothing is captured on anomaly")
            return lines
        if trigger.slow_step is not None:
            lines.append(f"trigger slow_step: a step longer than {trigger.slow_step:g}x the median of the last "
                         f"{trigger.window} steps (window) has the next step captured (so the first step it can judge is "
                         f"step {trigger.window + 1}: a run of fewer than {trigger.window + 2} steps captures nothing by it)")
        if trigger.late_rank is not None:
            lines.append(f"trigger late_rank: a rank entering a region later than the others by more than "
                         f"{trigger.late_rank:.0%} of the region's median time has the next step captured (where step "
                         f"metrics reach the driver)")
        if trigger.rollout_tail is not None:
            lines.append(f"trigger rollout_tail: a rollout replica whose tail (its running requests below half their peak, "
                         f"to its last end) takes more than {trigger.rollout_tail:.0%} of its generate window has the next "
                         f"step captured (where step metrics reach the driver)")
        lines.append(f"triggers capture at most {trigger.max_captures} steps (max_captures), none within "
                     f"{trigger.cooldown_steps} steps of the last (cooldown_steps), within the capture budgets")
        return lines


def rank_classes(named: Iterable[int], world: int, split: int | None = None) -> list[tuple[int, int]]:
    """Cut ranks ``0..world-1`` into inclusive ranges that resolve alike: each rank some role names
    is its own class, the ranks between them one class each (cut once more at ``split``, where
    replica ranks end). Costs O(len(named)) whatever ``world`` is."""
    def gap(a: int, b: int) -> list[tuple[int, int]]:
        if split is not None and a < split <= b:
            return [(a, split - 1), (split, b)]
        return [(a, b)]

    out: list[tuple[int, int]] = []
    start = 0
    for r in sorted({r for r in named if 0 <= r < world}):
        if start < r:
            out.extend(gap(start, r - 1))
        out.append((r, r))
        start = r + 1
    if start < world:
        out.extend(gap(start, world - 1))
    return out


def check_config(
    source: Any = None,
    overrides: Sequence[str] = (),
    *,
    world_size: int | None = None,
    roles: Sequence[str] | None = None,
    replicas: int | None = None,
    validate_backends: bool = True,
) -> CheckResult:
    """Load, validate (backends and save_path included) and resolve.

    Every independent mistake is found in one call, not only the first: the configuration's own
    (:func:`~rlprof.config.schema.read_config`), each role's ranks against the world, each selected
    tool that is not installed, each tool section its backend refuses, the save path. A check that
    needs what an earlier mistake left unknown is left out (no plan for a role whose ranks are outside
    the world, no backend check when the configuration cannot be read at all).

    The cost does not depend on the world size or the largest rank: ranks that resolve alike are
    resolved once (:func:`rank_classes`).

    :raises ConfigError: when invalid: the one mistake, or :class:`~rlprof.errors.ConfigErrors` listing each.
    """
    result, errors = examine_config(source, overrides, world_size=world_size, roles=roles, replicas=replicas,
                                    validate_backends=validate_backends)
    errors.raise_if_any()
    assert result is not None  # no mistake, so the configuration was read
    return result


def examine_config(
    source: Any = None,
    overrides: Sequence[str] = (),
    *,
    world_size: int | None = None,
    roles: Sequence[str] | None = None,
    replicas: int | None = None,
    validate_backends: bool = True,
) -> tuple[CheckResult | None, ErrorList]:
    """:func:`check_config` that returns the mistakes instead of raising them, with the result as far as
    the configuration could be read (None when it could not be read at all): for ``rlprof check``,
    which says what holds whatever the mistakes (:attr:`CheckResult.unselected`) next to them.

    :raises ConfigError: only for arguments that are not the configuration's (world size, replicas, roles)."""
    errors = ErrorList()
    for name, value in (("world size", world_size), ("replicas", replicas)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{name}: got {value!r}; allowed: a positive number (at least 1)")
    if roles:
        unknown = [r for r in roles if r not in ROLES]
        if unknown:
            raise ConfigError(f"roles: got {unknown[0]!r}; allowed: {', '.join(ROLES)} (comma-separated)")
    config = read_config(source, overrides, errors)
    if config is None:  # the input cannot be read at all: nothing more to check
        return None, errors
    if replicas is None and world_size is not None:
        replicas = replicas_in(config, world_size)
    if world_size is None:
        highest = max((role.ranks[-1] for role in config.roles.values() if role.ranks), default=0)
        world_size = max(2, highest + 1)
    if roles:
        groups = (tuple(roles),)
    elif config.agent_loop:
        groups = AGENT_LOOP_GROUPS
    else:
        groups = DEFAULT_GROUPS
    classes = []
    for group in groups:
        if not _ranks_inside_world(config, group, world_size, replicas, errors):
            continue
        named = [r for name in group for r in config.roles[name].ranks]
        # agent-loop rollout alone: its processes are the replicas, not one per GPU
        processes = replicas if replicas is not None and config.agent_loop and tuple(group) == ("rollout",) else None
        for first, last in rank_classes(named, processes or world_size, None if processes else replicas):
            plan = errors.attempt(resolve_plan, config, rank=first, world_size=world_size, roles=group,
                                  replica_rank=first if replicas is None or first < replicas else None,
                                  num_replicas=replicas)
            if plan is None:  # the same mistake would be found again for the group's other ranks
                break
            classes.append(RankClass(first, last, plan))
    result = CheckResult(config=config, world_size=world_size, classes=classes)
    if validate_backends:
        errors.attempt(require_usable_save_path, config)
        if config.global_.tools:
            _validate_backends(config, result, errors)
        result.unselected = check_unselected_sections(config)
    return result, errors


def _ranks_inside_world(config: ProfilerConfig, group: Sequence[str], world_size: int, replicas: int | None,
                        errors: ErrorList) -> bool:
    """Each role of ``group`` on its own names only ranks inside the world (its replicas for rollout in
    agent-loop mode), so that every role's ranks outside it are reported, not the first role's only."""
    fits = [errors.attempt(resolve_plan, config, rank=0, world_size=world_size, roles=(name,), replica_rank=0,
                           num_replicas=replicas) is not None
            for name in group]
    return all(fits)


def replicas_in(config: ProfilerConfig, world_size: int) -> int | None:
    """How many rollout replicas a world of ``world_size`` GPUs holds in agent-loop mode, when the
    config says a replica's GPUs (verl's rollout tp·dp·pp, :attr:`ProfilerConfig.gpus_per_replica`):
    verl's agent loop makes ``world_size // gpus_per_replica`` of them. None when not known."""
    if not config.agent_loop or not config.gpus_per_replica:
        return None
    return max(1, world_size // config.gpus_per_replica)


def require_usable_save_path(config: ProfilerConfig) -> None:
    """Raise :class:`ConfigError` naming ``global_profiler.save_path`` when profiling is on and the
    directory cannot be created or written there (a file, read-only, a symlink loop...). Cheap; no
    files are left behind. ``rlprof check`` calls it; ``Profiler()`` should too, on profiling ranks."""
    if not (config.enabled or armed(config)):
        return
    from rlprof.layout import check_save_path

    save_path = config.global_.save_path
    problem = check_save_path(save_path)
    if problem:
        raise ConfigError(f"global_profiler.save_path: got {save_path!r}: {problem}; allowed: a directory that can be "
                          "created and written by this user", key="global_profiler.save_path")




def _validate_backends(config: ProfilerConfig, result: CheckResult, errors: ErrorList) -> None:
    """Each selected tool is installed and loads; each backend that loads accepts every tool section it
    would be handed (one tool that is missing or fails to import hides no other tool's mistakes)."""
    from rlprof.installed import discover
    from rlprof.runtime.registry import Backends, load_backend

    installed = discover()
    loaded = {}
    for name in config.global_.tools:
        plugin = errors.attempt(load_backend, name, installed)
        if plugin is not None:
            loaded[name] = plugin
    backends = errors.attempt(Backends, list(loaded), instances=loaded)
    if backends is None:
        return
    for name in backends.names:
        if name in backends.failed:
            continue
        problems = backends.call_one(name, "check_environment") or []
        if problems:
            result.environment[name] = list(problems)
        # on its own key path, also when no role is enabled
        errors.attempt(backends.validated_global_section, name, config)
        for role in config.roles.values():
            if role.enable:
                validated = errors.attempt(backends.validated_tool_config, name, role)
                if validated is not None:
                    result.validated.setdefault(role.name, {})[name] = validated


def check_unselected_sections(config: ProfilerConfig) -> list[str]:
    """Each tool section written for an installed backend that is not selected
    (:func:`~rlprof.config.unselected.unselected_sections`), checked by that backend's
    ``validate_tool_config`` on the key path where it is written, as it would be once the tool is
    selected; what it refuses comes back as warnings, one per mistake. A backend that cannot be loaded
    is a warning too: it is not selected, so nothing of this run depends on it."""
    from rlprof.config.unselected import unselected_sections
    from rlprof.installed import discover
    from rlprof.runtime.registry import Backends, load_backend

    installed = discover()
    sections = [found for found in unselected_sections(config.source, config.global_.tools) if found[0] in installed]
    selected = ", ".join(config.global_.tools) or "null"
    warnings: list[str] = []
    checkers: dict[str, Backends | None] = {}
    for tool, path, section in sections:
        if tool not in checkers:
            try:
                checkers[tool] = Backends([tool], instances={tool: load_backend(tool, installed)})
            except ConfigError as exc:
                checkers[tool] = None
                warnings.append(f"{path}: not checked: {exc} ({tool} is not a selected tool)")
        backends = checkers[tool]
        if backends is None:
            continue
        try:
            backends.validated_section(tool, section, path)
        except ConfigError as exc:
            for mistake in exc.errors if isinstance(exc, ConfigErrors) else (exc,):
                warnings.append(f"{mistake} ({tool} is not a selected tool, global_profiler.tool={selected}: ignored by "
                                "this run, an error once it is selected)")
    return warnings
