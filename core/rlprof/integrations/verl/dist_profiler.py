"""``DistProfiler``: verl's per-worker profiler object, backed by one :class:`rlprof.Profiler`.

verl builds one per worker (``DistProfiler(rank, config=<role section>, tool_config=<the tool's
settings>, save_file_prefix=<worker role or model type>)``); its trainer calls ``start(profile_step=N)``
and ``stop(run_command=<last profiled step>)`` on profiled steps only; the update loop calls
``step()`` once per mini-batch; worker methods carry ``@DistProfiler.annotate(role=...)``.

What rlprof decides instead of verl (one rule set for every tool):

* rank selection: ``all_ranks``, else ``rank in ranks``; ``ranks: []`` collects nothing (the
  guides' rule — verl 0.9 falls back to rank 0 there), said once per process in a warning;
* output: ``<save_path>/<run id>/...`` with a manifest; every process of one training run uses the
  same run id (:func:`rlprof.integrations.verl.run_id.shared_run_id`);
* ``step()`` ends one iteration of the innermost sampled region (:meth:`rlprof.Profiler.next_iteration`),
  which is how ``tool_config.<tool>.schedule`` samples update mini-batches.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable

from rlprof.integrations.verl.sections import field, hosted_roles, rlprof_source

log = logging.getLogger("rlprof")
_WARNED: set[str] = set()
"""Keys already warned about in this process (the ranks=[] rule is said once, not per worker)."""
_STARTED: list["DistProfiler"] = []
"""The DistProfilers of this process between ``start()`` and ``stop()``: verl's update loop calls
``step()`` on the inner TrainingWorker's profiler, which the trainer never starts (it starts the outer
ActorRolloutRefWorker's); that ``step()`` advances the started one of the same rank."""


class DistProfiler:
    """verl's ``DistProfiler`` surface over an :class:`rlprof.Profiler` (see the module doc)."""

    _rlprof_live = False
    """True only between ``start()`` and ``stop()`` of a step this process profiles: the one flag the
    decorated methods read when idle. Always set on the instance too: an instance attribute is found
    faster than a class attribute, and this read is the whole idle cost of ``annotate``."""

    def __init__(self, rank: int, config: Any = None, tool_config: Any = None, save_file_prefix: str | None = None,
                 **kwargs: Any):
        from rlprof.config.schema import ROLES, load_config
        from rlprof.runtime.plan import role_selected
        from rlprof.runtime.profiler import Profiler
        from rlprof.integrations.verl.run_id import shared_run_id

        if tool_config is None and config is not None:
            tool_config = field(config, "tool_config")
        self.rank = rank
        self.config = config
        self.tool_config = tool_config
        """As verl: the tool's settings (rollout servers read it to configure their engine's profiler)."""
        self.save_file_prefix = save_file_prefix
        self._rlprof_live = False
        self.roles = hosted_roles(save_file_prefix)
        self.role = self.roles[0]
        self._enable = bool(field(config, "enable", False))
        self._this_step = False
        self._steps_started = 0
        self._regions: dict[Any, Any] = {}

        ranks = list(field(config, "ranks", None) or [])
        world = int(kwargs.get("world_size") or os.environ.get("WORLD_SIZE") or 0)
        world = max([world, rank + 1] + [int(r) + 1 for r in ranks if isinstance(r, int)])
        cfg = load_config(rlprof_source(config, tool_config, self.roles)).with_overrides(caller_steps=True)
        role_cfg = cfg.roles[self.role]
        role_selected(role_cfg, rank, world)  # ranks outside the world: an error naming the key (when enabled)
        # verl's check_this_rank: rank selection alone, whatever enable and tool say (its calls pair it
        # with check_enable()); ranks=[] selects no rank here (the guides' rule, warned about below)
        self._this_rank = role_cfg.all_ranks or rank in role_cfg.ranks
        if self._enable and not role_cfg.all_ranks and not role_cfg.ranks and role_cfg.key_path not in _WARNED:
            _WARNED.add(role_cfg.key_path)
            log.warning(
                "rlprof: %s.ranks is [] and all_ranks is false, so this role collects nothing on any rank (the rule of "
                "verl's profiling guides; verl 0.9's own DistProfiler would profile rank 0): set ranks=[0] or all_ranks=true",
                role_cfg.key_path)
        self._prof = Profiler(cfg, rank=rank, world_size=world, roles=self.roles, run_id=shared_run_id())
        if self._prof.plan.active:
            self._this_rank = self._this_rank or any(self._prof.plan.roles[r].selected for r in self.roles)

    # ------------------------------------------------------------------ verl's queries

    def check_enable(self) -> bool:
        """``enable`` of the role section."""
        return self._enable

    def check_this_rank(self) -> bool:
        """This rank is selected (``all_ranks`` or in ``ranks``), whatever ``enable`` and the tool say, as verl answers."""
        return self._this_rank

    def check_this_step(self) -> bool:
        """Between ``start()`` and ``stop()`` on a selected rank."""
        return self._this_step

    def is_discrete_mode(self) -> bool:
        """One capture per annotated region (``tool_config.<tool>.discrete``) instead of one per step."""
        return bool(self._prof.config.roles[self.role].discrete)

    @property
    def profiler(self):
        """The underlying :class:`rlprof.Profiler`."""
        return self._prof

    # ------------------------------------------------------------------ verl's switches

    def start(self, **kwargs: Any) -> None:
        """A profiled training step begins (verl's trainer passes ``profile_step``; ``role`` is a label)."""
        if not (self._enable and self._this_rank):
            return
        self._steps_started += 1
        step = kwargs.get("profile_step")
        self._this_step = True
        self._prof.start_step(int(step) if step is not None else self._steps_started)
        self._rlprof_live = self._prof.active
        if self not in _STARTED:
            _STARTED.append(self)

    def stop(self, run_command: bool = True) -> None:
        """The profiled step ends; with ``run_command`` (the trainer's last profiled step) the finish
        hook runs now, synchronously, on its ranks — which may include ranks that did not profile."""
        if self._enable and self._this_rank:
            self._this_step = False
            self._rlprof_live = False
            if self in _STARTED:
                _STARTED.remove(self)
            self._prof.step_boundary()
        if self._enable and run_command:
            self._finish_hook()

    def run_finish_hook(self, run_command: bool = True) -> None:
        """Run ``finish_hook_cmd`` now (drivers that stop their own backend); nothing when
        ``run_command`` is False (an earlier profiled step)."""
        if self._enable and run_command:
            self._finish_hook()

    def _finish_hook(self) -> None:
        if getattr(self._prof, "_finish", None) is None:
            if field(self.config, "finish_hook_cmd"):
                from rlprof.runtime.finish_hook import say

                say(self.rank, "not run on this rank (rank not selected by finish_hook_ranks/finish_hook_all_ranks)")
            return
        self._prof.run_finish_hook()

    def step(self) -> None:
        """One mini-batch of the update ended: the next iteration of the innermost sampled region
        begins. Free when nothing is sampled."""
        if not (self._enable and self._this_rank):
            return
        target = self
        if not self._this_step:  # the inner TrainingWorker's profiler: advance the started one of this rank
            target = next((p for p in reversed(_STARTED) if p.rank == self.rank), None)
            if target is None:
                return
        target._prof.next_iteration()

    def finalize(self) -> list[dict[str, Any]]:
        """End this process's run (also happens at exit): backends write, the manifest closes."""
        if self in _STARTED:
            _STARTED.remove(self)
        return self._prof.finalize()

    # ------------------------------------------------------------------ annotate

    @classmethod
    def annotate(cls, message: str | None = None, color: str | None = None, domain: str | None = None,
                 category: str | None = None, **kwargs_outer: Any) -> Callable:
        """Decorate a worker method (the worker holds its profiler in ``self.profiler``).

        The range is named ``message or role or func.__name__`` (verl's rule). A name that starts
        with a role (``ref_compute_log_prob``) is that role's region; any other (``train_batch``,
        ``generate``) is a region of the worker's own role — so a critic TrainingWorker's
        ``train_batch`` is ``critic_train_batch``. ``scheduled=True`` marks the region whose
        iterations ``step()`` advances: only it is sampled by ``tool_config.<tool>.schedule``; the
        role's other regions are captured whole, as in verl. ``color``/``domain``/``category`` are the backends' business
        (NVTX/mstx colours): accepted and not used by rlprof's ranges.

        Cost when nothing is profiled: one attribute check; the role and stage are resolved at
        decoration and the region once per profiler.
        """

        def decorator(func: Callable) -> Callable:
            name = str(message or kwargs_outer.get("role") or func.__name__)
            named_role, stage = _split(name)
            key = (name, bool(kwargs_outer.get("scheduled", False)))

            @functools.wraps(func)
            def wrapper(self_instance, *args, **kwargs):
                try:
                    live = self_instance.profiler._rlprof_live
                except AttributeError:  # no profiler, or verl's own
                    return func(self_instance, *args, **kwargs)
                if live is not True:
                    return func(self_instance, *args, **kwargs)
                profiler = self_instance.profiler
                region = profiler._regions.get(key)
                if region is None:
                    region = profiler._region(key, named_role, stage, name)
                with region:
                    return func(self_instance, *args, **kwargs)

            return wrapper

        return decorator

    def _region(self, key: Any, named_role: str | None, stage: str | None, name: str):
        """The cached rlprof region for an annotation on this profiler (first call only)."""
        if named_role in self.roles:
            role = named_role
        else:  # no role in the name, or a role this worker does not host: a stage of its own role
            role, stage = self.role, name
        scheduled = key[1]
        # verl samples only the scheduled stage (the update loop); the role's other stages stay whole
        region = self._regions[key] = self._prof.role(role, stage) if scheduled else self._prof.unsampled_role(role, stage)
        return region


def _split(name: str) -> tuple[str | None, str | None]:
    """``"actor_update"`` → ``("actor", "update")``; ``"actor"`` → ``("actor", None)``;
    ``"train_batch"`` → ``(None, "train_batch")``."""
    from rlprof.config.schema import ROLES

    for role in ROLES:
        if name == role:
            return role, None
        if name.startswith(role + "_"):
            return role, name[len(role) + 1:]
    return None, name


def build_rollout_dist_profiler(replica_rank: int, replica_world_size: int, config: Any = None,
                                tool_config: Any = None) -> DistProfiler:
    """A :class:`DistProfiler` for rollout replica ``replica_rank`` whose engine spans
    ``replica_world_size`` GPUs: ``ranks`` lists global GPU ranks, and a replica is selected when it
    owns one of them (``rank // replica_world_size``), as in verl. ``ranks: []`` selects no replica
    (rlprof's rule). The caller's config is not changed."""
    if config is not None and not field(config, "all_ranks", False):
        ranks = list(field(config, "ranks", None) or [])
        if ranks and replica_world_size and replica_world_size > 0:
            config = _with_ranks(config, sorted({int(r) // replica_world_size for r in ranks}))
    return DistProfiler(rank=replica_rank, config=config, tool_config=tool_config, save_file_prefix="rollout")


def _with_ranks(config: Any, ranks: list[int]) -> Any:
    import copy
    import dataclasses

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        try:
            return dataclasses.replace(config, ranks=ranks)
        except Exception:  # verl's BaseConfig dataclasses may refuse replace(); copy and set instead
            pass
    config = copy.deepcopy(config)
    if isinstance(config, dict):
        config["ranks"] = ranks
    else:
        object.__setattr__(config, "ranks", ranks) if dataclasses.is_dataclass(config) else setattr(config, "ranks", ranks)
    return config
