"""``rlprof check``: validate a configuration against the installed backends and show the plan.

The plan is resolved for every process of a verl-shaped job: on each rank one process hosting
actor+rollout+ref (the hybrid engine), one hosting critic and one hosting reward (or one process
per rank hosting ``--roles``); in agent-loop mode rollout replicas are separate processes. Backends validate their ``tool_config`` sections; a backend's
``check_environment`` problems (e.g. torch_npu not importable) are printed as warnings: the
configuration is still valid and training would run without that capture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .config import ROLES, ProfilerConfig, load_config
from .plan import ProcessPlan, resolve_plan

DEFAULT_GROUPS = (("actor", "rollout", "ref"), ("critic",), ("reward",))
AGENT_LOOP_GROUPS = (("actor", "ref"), ("rollout",), ("critic",), ("reward",))
"""In agent-loop mode rollout replicas are processes of their own, counted by replica rank."""


@dataclass
class CheckResult:
    config: ProfilerConfig
    world_size: int
    plans: list[ProcessPlan]
    environment: dict[str, list[str]] = field(default_factory=dict)
    validated: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def warnings(self) -> list[str]:
        out = list(self.config.warnings)
        for backend, problems in self.environment.items():
            out.extend(f"backend {backend!r}: {p}" for p in problems)
        return out

    def selection(self) -> dict[str, dict[str, Any]]:
        """{role: {"ranks": [...], "mode": "e2e"|"discrete", "schedule": {...}|None}} over all processes."""
        out: dict[str, dict[str, Any]] = {}
        for plan in self.plans:
            for name, role in plan.roles.items():
                entry = out.setdefault(name, {"ranks": [], "mode": None, "schedule": None})
                if role.selected:
                    entry["ranks"].append(plan.rank)
                    entry["mode"] = "discrete" if plan.discrete else "e2e"
                    if role.schedule is not None:
                        entry["schedule"] = vars(role.schedule)
        return out

    def as_dict(self) -> dict[str, Any]:
        g = self.config.global_
        return {
            "tools": list(g.tools),
            "steps": list(g.steps) if g.steps else [],
            "save_path": g.save_path,
            "profile_continuous_steps": g.profile_continuous_steps,
            "world_size": self.world_size,
            "agent_loop": self.config.agent_loop,
            "roles": self.selection(),
            "captures": [list(run) for run in (self.plans[0].runs if self.plans else ())],
            "warnings": self.warnings,
        }

    def render(self) -> str:
        g = self.config.global_
        lines = []
        if not self.config.enabled:
            why = "no global_profiler.tool" if not g.tools else "global_profiler.steps is null" if not g.steps else "no role has profiler.enable=true"
            lines.append(f"profiling is off ({why}); the configuration is valid")
        else:
            lines.append(f"tools: {', '.join(g.tools)}   steps: {list(g.steps)}   save_path: {g.save_path}   world size: {self.world_size}")
            if g.profile_continuous_steps:
                runs = self.plans[0].runs if self.plans else ()
                lines.append("captures merged over consecutive steps: " + ", ".join(f"{list(r)}" for r in runs))
            selection = self.selection()
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
                        lines.append(f"  {name:<7} {entry['mode']:<9} {counts} {_ranges(entry['ranks'])}{extra}")
                    else:
                        reason = next((p.roles[name].reason for p in self.plans if name in p.roles), "")
                        lines.append(f"  {name:<7} off       ({reason})")
        for warning in self.warnings:
            lines.append(f"warning: {warning}")
        return "\n".join(lines)


def _ranges(ranks: Sequence[int]) -> str:
    ranks = sorted(set(ranks))
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ",".join(parts)


def check_config(
    source: Any = None,
    overrides: Sequence[str] = (),
    *,
    world_size: int | None = None,
    roles: Sequence[str] | None = None,
    replicas: int | None = None,
    validate_backends: bool = True,
) -> CheckResult:
    """Load, validate (backends included) and resolve; raises :class:`ConfigError` when invalid."""
    config = load_config(source, overrides)
    if world_size is None:
        named = [r for role in config.roles.values() for r in role.ranks]
        world_size = max([2] + [r + 1 for r in named])
    if roles:
        groups = (tuple(roles),)
    elif config.agent_loop:
        groups = AGENT_LOOP_GROUPS
    else:
        groups = DEFAULT_GROUPS
    plans = []
    for group in groups:
        for rank in range(world_size):
            plans.append(resolve_plan(config, rank=rank, world_size=world_size, roles=group,
                                      replica_rank=rank if replicas is None or rank < replicas else None,
                                      num_replicas=replicas))
    result = CheckResult(config=config, world_size=world_size, plans=plans)
    if validate_backends and config.global_.tools:
        _validate_backends(config, result)
    return result


def _validate_backends(config: ProfilerConfig, result: CheckResult) -> None:
    from .registry import Backends

    backends = Backends(config.global_.tools)
    for name in config.global_.tools:
        if name in backends.failed:
            continue
        problems = backends.call_one(name, "check_environment") or []
        if problems:
            result.environment[name] = list(problems)
        for role in config.roles.values():
            if role.enable:
                result.validated.setdefault(role.name, {})[name] = backends.validated_tool_config(name, role)
