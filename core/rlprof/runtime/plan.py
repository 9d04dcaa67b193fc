"""The resolver: for one process, decide once what is profiled. Pure functions, no I/O.

Rules (one place, one rule each):

* **Steps.** ``global_profiler.steps`` lists the profiled steps; null (or no tool, or no enabled
  role) profiles nothing.
* **Ranks.** A role is selected on this process when it is hosted here, ``enable`` is true and
  ``all_ranks`` is true or the process's rank is in ``ranks``. ``ranks: []`` selects nothing (the
  guides' rule; the config warns). Training roles count the global rank; rollout in agent-loop mode
  counts the replica rank (verl's guide: "Replica Rank (inference instance index), not Global
  Rank"). A rank outside the world (or outside the replicas) is a ConfigError; for rollout it names
  the replica that holds the rank read as a global GPU rank, when the GPUs per replica are known.
  With a tool of :data:`~rlprof.config.sections.EVERY_RANK_TOOLS` selected (``precision_debugger``),
  every rank of an enabled role is selected, whatever ``ranks``/``all_ranks`` say: verl's rule for it.
* **Mode.** End-to-end: one capture per profiled step (or merged run of consecutive steps with
  ``profile_continuous_steps``) holding every selected role of the process as named ranges.
  Discrete: one capture per region of a selected role. The selected roles of one process must agree.
* **Sampling.** A role's ``schedule`` cuts each of its regions into active windows of iterations
  (see :mod:`rlprof.config.schedule`); in discrete mode each window is a capture.
* **Arming.** A run is armed (:func:`armed`) when a tool is set, a role is enabled and
  ``global_profiler.on_demand`` is not false, whatever ``steps`` says: the roles the rank rules select
  (:attr:`RolePlan.armed`) then capture a step asked for mid-run (``rlprof capture``, a trigger), as
  :meth:`ProcessPlan.unplanned` makes them selected. Which steps those are is decided at run time by the
  driver's :class:`rlprof.runtime.unplanned.Decider`, never here.
* **Timing.** With a tool set and ``global_profiler.step_metrics`` on, every hosted role whose ``enable``
  is true is timed on every step and rank, whatever ``steps`` and ``ranks`` say: the step metrics need
  every rank (the slowest, the spread, the late one), and a timing costs about a microsecond.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Mapping, Sequence

from rlprof.config.schema import EVERY_RANK_TOOLS, ROLES, ProfilerConfig, RoleConfig
from rlprof.errors import ConfigError
from rlprof.notices import say_once
from rlprof.config.schedule import Schedule


@dataclass(frozen=True)
class RolePlan:
    role: str
    selected: bool
    reason: str
    """Why the role is (not) selected here, for ``rlprof check``."""
    schedule: Schedule | None = None
    every_rank: str | None = None
    """The tool that selected this rank whatever ``ranks`` says (:data:`EVERY_RANK_TOOLS`), else None."""
    armed: bool = False
    """The role captures here when a capture is asked for mid-run (``rlprof capture``, a trigger): a tool is
    set, the run is armed (:func:`armed`) and the rank rules select it, whatever ``steps`` says."""


@dataclass(frozen=True)
class ProcessPlan:
    """Everything the Profiler of one process needs to know; nothing else decides."""

    rank: int
    world_size: int
    tools: tuple[str, ...]
    roles: Mapping[str, RolePlan]
    """Hosted roles, in canonical order."""
    discrete: bool
    runs: tuple[tuple[int, ...], ...]
    """Capture runs of steps: ``((1, 2), (5,))`` with continuous merging, else one step per run."""
    warnings: tuple[str, ...] = ()
    every_step: bool = False
    """Every ``start_step`` is profiled, one capture per step (the caller decides the steps)."""
    timed: tuple[str, ...] = ()
    """Hosted roles whose regions are timed on every step for the step metrics (see the module doc)."""
    on_request: bool = False
    """The plan of a process that captures a step nobody planned (:meth:`unplanned`): active, its armed
    roles selected."""

    @cached_property
    def armed(self) -> tuple[str, ...]:
        """Hosted roles that capture a step asked for mid-run (``rlprof capture``, a trigger): empty when
        the run is not armed or no hosted role is selected on this rank."""
        return tuple(name for name, r in self.roles.items() if r.armed)

    def unplanned(self) -> "ProcessPlan":
        """This plan, able to capture unplanned steps: its armed roles selected (the steps planned stay)."""
        if self.on_request or not self.armed:
            return self
        roles = {n: r if r.selected or not r.armed else replace(r, selected=True, reason="armed: captures on request")
                 for n, r in self.roles.items()}
        return replace(self, roles=roles, on_request=True)

    # The answers below are asked on every training step (``start_step`` of a step that is not profiled
    # included: the hot path), so each is worked out once per plan; a plan never changes.

    @cached_property
    def active(self) -> bool:
        """This process makes hook calls at all."""
        return bool(self.runs or self.every_step or self.on_request) and any(r.selected for r in self.roles.values())

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(s for run in self.runs for s in run) if self.active else ()

    @cached_property
    def selected_roles(self) -> tuple[str, ...]:
        return tuple(name for name, r in self.roles.items() if r.selected)

    @cached_property
    def _run_by_step(self) -> dict[int, tuple[int, ...]]:
        """Each listed step -> its run: a lookup per step whatever the length of ``steps`` (a scan of
        the runs cost ~25 us per step with 1,000 profiled steps listed, ~240 us with 10,000)."""
        return {step: run for run in self.runs for step in run}

    def is_profiled(self, step: int) -> bool:
        return self.active and (self.every_step or step in self._run_by_step)

    def run_of(self, step: int) -> tuple[int, ...]:
        return self._run_by_step.get(step) or (step,)

    def expected_captures(self, stages: Mapping[str, Sequence[str]] | None = None) -> int | None:
        """How many capture windows this process opens over the whole run.

        End-to-end: one per run of steps. Discrete: per profiled step, one per region of each selected
        role (``stages`` maps a role to the stages it runs each step, e.g. ``{"actor": ["compute_log_prob",
        "update"]}``), times the windows of its schedule. None when that cannot be known (discrete without
        ``stages`` for a selected role, an unbounded schedule).
        """
        if not self.active:
            return 0
        if self.every_step or self.on_request:
            return None
        if not self.discrete:
            return len(self.runs)
        per_step = 0
        for name in self.selected_roles:
            if stages is None or name not in stages:
                return None
            windows = 1
            schedule = self.roles[name].schedule
            if schedule is not None:
                if schedule.windows() is None:
                    return None
                windows = schedule.windows()
            per_step += len(stages[name]) * windows
        return per_step * len(self.steps)


def step_runs(steps: Sequence[int] | None, continuous: bool) -> tuple[tuple[int, ...], ...]:
    """Group profiled steps into capture runs: consecutive steps merge when ``continuous``."""
    if not steps:
        return ()
    ordered = sorted(steps)
    if not continuous:
        return tuple((s,) for s in ordered)
    runs: list[list[int]] = [[ordered[0]]]
    for step in ordered[1:]:
        if step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    return tuple(tuple(r) for r in runs)


def role_selected(cfg: RoleConfig, rank: int, world: int, *, counts: str = "rank",
                  gpus_per_replica: int | None = None) -> tuple[bool, str]:
    """Whether ``cfg`` selects ``rank`` (out of ``world``); raises for ranks outside the world.

    ``gpus_per_replica`` (replica ranks only, when known) lets the error name the replica that holds
    a rank read as a global GPU rank, the likeliest mistake (:func:`replicas_holding`)."""
    if not cfg.enable:
        return False, "enable=false"
    if cfg.follows and counts != "rank" and cfg.ranks and cfg.ranks[-1] >= world:
        cfg = _inherited_within(cfg, world, counts, gpus_per_replica)
    if cfg.ranks and cfg.ranks[-1] >= world:  # ranks are sorted (rlprof.config.values.parse_ranks)
        bad = cfg.ranks[bisect.bisect_left(cfg.ranks, world)]
        shown = _shown_ranks(cfg.ranks)
        raise ConfigError(
            f"{cfg.key_path}.ranks: got {shown}; allowed: {counts}s 0..{world - 1} "
            f"({counts} {bad} is outside a world of {world}"
            f"{replicas_holding(cfg.ranks, bad, world, gpus_per_replica) if gpus_per_replica else ''})",
            key=f"{cfg.key_path}.ranks",
        )
    if cfg.all_ranks:
        return True, "all_ranks=true"
    if not cfg.ranks:
        return False, "ranks=[] (collects nothing)"
    i = bisect.bisect_left(cfg.ranks, rank)
    if i < len(cfg.ranks) and cfg.ranks[i] == rank:
        return True, f"{counts} {rank} in ranks={_shown_ranks(cfg.ranks)}"
    return False, f"{counts} {rank} not in ranks={_shown_ranks(cfg.ranks)}"


def _inherited_within(cfg: RoleConfig, world: int, counts: str, gpus_per_replica: int | None) -> RoleConfig:
    """A rollout section nobody wrote follows the actor's, whose ``ranks`` the user wrote as global ranks
    (verl's own shipped scripts do: actor ranks ``[1, 2]`` on 2 replicas of 4 GPUs). Read as replica ranks,
    those past the replicas are left out with one warning saying what to write, not refused: the user
    never wrote a rollout rank. A rollout section the user wrote is held to its word (an error)."""
    kept = tuple(r for r in cfg.ranks if r < world)
    left = [r for r in cfg.ranks if r >= world]
    hint = replicas_holding(cfg.ranks, left[0], world, gpus_per_replica) if gpus_per_replica else ""
    say_once(f"plan: {cfg.key_path} inherits ranks", logging.getLogger("rlprof"),
             "rlprof: %s follows %s's profiler section; its ranks %s count %ss there, and %s %s past the %d "
             "there are is left out%s. Write %s.ranks to choose them", cfg.key_path, cfg.follows,
             _shown_ranks(cfg.ranks), counts, counts, _shown_ranks(tuple(left)), world, hint, cfg.key_path)
    return replace(cfg, ranks=kept)


def replicas_holding(ranks: tuple[int, ...], bad: int, replicas: int, gpus_per_replica: int) -> str:
    """The hint for rollout ``ranks`` outside the replicas: they count replica ranks, and read as
    global GPU ranks (as verl 0.9.1's code does, with ``gpus_per_replica`` GPUs each) they are held by
    these replicas: ``"; ranks count replicas, not GPUs: global rank 4 is held by replica 1 (4 GPUs
    per replica): write ranks: [1]"``. Empty when that reading leaves the replicas too."""
    held = sorted({r // gpus_per_replica for r in ranks})
    if held[-1] >= replicas:
        return ""
    return (f"; ranks count replicas, not GPUs: global rank {bad} is held by replica {bad // gpus_per_replica} "
            f"({gpus_per_replica} GPUs per replica): write ranks: {_shown_ranks(tuple(held))}")


def _shown_ranks(ranks: tuple[int, ...]) -> str:
    """A ranks list for a message; long ones shortened (a 100 000-rank list would cost per call)."""
    if len(ranks) <= 20:
        return str(list(ranks))
    return f"[{', '.join(map(str, ranks[:10]))}, ...] ({len(ranks)} ranks)"


def resolve_plan(
    config: ProfilerConfig,
    *,
    rank: int,
    world_size: int,
    roles: Sequence[str],
    replica_rank: int | None = None,
    num_replicas: int | None = None,
) -> ProcessPlan:
    """Resolve the plan of the process with global ``rank`` hosting ``roles``.

    ``replica_rank``/``num_replicas`` are what rollout's ranks count in agent-loop mode (defaults:
    the global rank and world size).
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ConfigError(f"rank: got {rank!r} with world_size={world_size!r}; allowed: 0 <= rank < world_size")
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ConfigError(f"roles: got {unknown[0]!r}; allowed: {', '.join(ROLES)}")
    g = config.global_
    profiling = bool(g.tools and (g.steps or g.caller_steps))
    arming = armed(config)
    every_rank = next((t for t in g.tools if t in EVERY_RANK_TOOLS), None)
    planned: dict[str, RolePlan] = {}
    for name in ROLES:
        if name not in roles:
            continue
        cfg = config.roles[name]
        if name == "rollout" and config.agent_loop:
            r, w, counts, gpus = (
                rank if replica_rank is None else replica_rank,
                world_size if num_replicas is None else num_replicas,
                "replica rank",
                config.gpus_per_replica,
            )
            actor = config.roles["actor"]
            if not cfg.follows and cfg.ranks and cfg.ranks == actor.ranks:
                # verl's own config writes rollout's ranks as ${oc.select:...actor.profiler.ranks}: the actor's
                # global ranks, reaching rollout unwritten (its shipped scripts rely on it)
                cfg = replace(cfg, follows="actor")
        else:
            r, w, counts, gpus = rank, world_size, "rank", None
        selected, reason = role_selected(cfg, r, w, counts=counts, gpus_per_replica=gpus)
        chosen_by = every_rank if cfg.enable and every_rank is not None else None
        if chosen_by is not None:
            selected, reason = True, f"every rank: {chosen_by} follows verl (ranks/all_ranks not read)"
        on_request = arming and selected
        if not profiling:
            selected, reason, chosen_by = False, "no global_profiler.tool" if not g.tools else "global_profiler.steps is null", None
        planned[name] = RolePlan(name, selected, reason, cfg.schedule if selected or on_request else None, chosen_by,
                                 armed=on_request)
    chosen = [config.roles[n] for n, p in planned.items() if p.selected or p.armed]
    modes = {c.discrete for c in chosen}
    if len(modes) > 1:
        discrete = [c for c in chosen if c.discrete]
        e2e = [c for c in chosen if not c.discrete]
        raise ConfigError(
            f"roles {discrete[0].name} and {e2e[0].name} share this process (rank {rank}) but disagree on discrete: "
            f"{discrete[0].key_path} is discrete, {e2e[0].key_path} is end-to-end; allowed: one mode per process: "
            f"set tool_config.<tool>.discrete the same for both",
            key=e2e[0].key_path,
        )
    timed = tuple(n for n in planned if g.tools and g.step_metrics and config.roles[n].enable)
    return ProcessPlan(
        rank=rank,
        world_size=world_size,
        timed=timed,
        tools=g.tools,
        roles=planned,
        discrete=bool(modes and modes.pop()),
        runs=step_runs(g.steps, g.profile_continuous_steps) if profiling else (),
        warnings=config.warnings,
        every_step=profiling and g.caller_steps,
    )


def armed(config: ProfilerConfig) -> bool:
    """The run captures steps asked for mid-run (``rlprof capture``, ``global_profiler.trigger``): a tool is set,
    a role is enabled and ``global_profiler.on_demand`` is not false, whatever ``steps`` says. The one rule."""
    g = config.global_
    return bool(g.tools and g.on_demand and any(r.enable for r in config.roles.values()))


def armed_mode(config: ProfilerConfig) -> str:
    """The mode an armed run's captures take, from its enabled roles: ``e2e``, ``discrete``, or both (``discrete,
    e2e``: roles in different processes may differ). What the driver's ``armed`` record says."""
    modes = {"discrete" if r.discrete else "e2e" for r in config.roles.values() if r.enable}
    return ", ".join(sorted(modes)) or "?"


def primary_role(plan: ProcessPlan) -> str | None:
    """The role whose tool_config an end-to-end capture uses: the first selected, canonical order."""
    selected = plan.selected_roles
    return selected[0] if selected else None
