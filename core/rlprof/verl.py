"""A drop-in for verl's ``DistProfiler`` backed by rlprof: a verl worker switches by changing an import.

verl's workers build ``DistProfiler(rank=..., config=<role profiler section>, tool_config=...,
save_file_prefix=<role>)``, its trainer calls ``start_profile(role=..., profile_step=step)`` /
``stop_profile(run_command=...)`` only on profiled steps, and worker methods are decorated with
``@DistProfiler.annotate(role="actor_update", color=...)``. This module keeps that surface:

* the rank/enable/ranks/all_ranks rules are rlprof's (one resolver; ``ranks: []`` collects nothing,
  as the guides say — verl 0.9 itself falls back to rank 0 there);
* ``start``/``stop`` are rlprof's ``start_step``/``step_boundary``; the trainer decides the steps;
* ``stop(run_command=True)`` (the trainer's last profiled step) starts ``finish_hook_cmd``;
* ``annotate(role="actor_update")`` is ``prof.role("actor", "update")``; a role string that does not
  start with a known role becomes a stage of the worker's own role (``train_batch`` → ``actor_train_batch``).

Output goes to rlprof's layout under ``save_path`` with its manifest, whatever the tool.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Mapping

from .config import ROLES

_PROFILER_KEYS = ("enable", "all_ranks", "ranks", "tool_config", "discrete")
_GLOBAL_KEYS = ("save_path", "relocate_results", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks")


def _as_mapping(config: Any) -> dict[str, Any]:
    """A role profiler section as a plain dict, from a mapping, a DictConfig or verl's dataclass."""
    if config is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(config):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if isinstance(config, Mapping):
        return {k: _plain(v) for k, v in config.items()}
    if dataclasses.is_dataclass(config):
        return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
    return {k: _plain(v) for k, v in vars(config).items() if not k.startswith("_")}


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping) or dataclasses.is_dataclass(value):
        return _as_mapping(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def split_role(name: str, default_role: str) -> tuple[str, str | None]:
    """``"actor_update"`` → ``("actor", "update")``; ``"train_batch"`` → ``(default_role, "train_batch")``."""
    for role in ROLES:
        if name == role:
            return role, None
        if name.startswith(role + "_"):
            return role, name[len(role) + 1:]
    return default_role, name


class DistProfiler:
    """verl's ``DistProfiler`` surface over an :class:`rlprof.Profiler`."""

    def __init__(self, rank: int, config: Any = None, tool_config: Any = None, save_file_prefix: str | None = None,
                 *, world_size: int | None = None, run_id: str | None = None, **kwargs: Any):
        from .profiler import Profiler

        section = _as_mapping(config)
        self.rank = rank
        self.config = config
        self.save_file_prefix = save_file_prefix
        tool = section.get("tool")
        tools = [tool] if isinstance(tool, str) and tool else list(tool or [])
        role = save_file_prefix if save_file_prefix in ROLES else "actor"
        self.role = role
        tool_configs = dict(section.get("tool_config") or {})
        if tool_config is not None and tools:
            tool_configs[tools[0]] = _as_mapping(tool_config)
        profiler_section = {k: section[k] for k in _PROFILER_KEYS if k in section and k != "tool_config"}
        profiler_section["tool_config"] = {k: v for k, v in tool_configs.items() if k in tools} if tools else {}
        global_section = {k: section[k] for k in _GLOBAL_KEYS if k in section and section[k] is not None}
        global_section["tool"] = tools or None
        ranks = section.get("ranks") or []
        world = world_size or int(os.environ.get("WORLD_SIZE", "0")) or max([rank + 1] + [r + 1 for r in ranks])
        raw = {"global_profiler": global_section}
        for name, path in (("actor", ("actor_rollout_ref", "actor")), ("rollout", ("actor_rollout_ref", "rollout")),
                           ("ref", ("actor_rollout_ref", "ref")), ("critic", ("critic",)), ("reward", ("reward_model",))):
            node = raw
            for part in path:
                node = node.setdefault(part, {})
            node["profiler"] = profiler_section
        from .config import load_config

        cfg = load_config(raw).with_overrides(caller_steps=True)
        self._prof = Profiler(cfg, rank=rank, world_size=world, roles=ROLES, run_id=run_id)
        self._this_step = False
        self._step_counter = 0

    # -- verl's queries
    def check_enable(self) -> bool:
        return bool(self._prof.config.roles[self.role].enable)

    def check_this_rank(self) -> bool:
        return self._prof.active

    def check_this_step(self) -> bool:
        return self._this_step

    def is_discrete_mode(self) -> bool:
        return bool(self._prof.config.roles[self.role].discrete)

    # -- verl's switches
    def start(self, **kwargs: Any) -> None:
        """Begin a profiled step (the trainer passes ``profile_step``)."""
        self._step_counter += 1
        step = kwargs.get("profile_step")
        self._prof.start_step(int(step) if step is not None else self._step_counter)
        self._this_step = self._prof.active

    def stop(self, run_command: bool = True) -> None:
        """End the profiled step; on the last one (``run_command``) start ``finish_hook_cmd``."""
        self._prof.step_boundary()
        self._this_step = False
        if run_command:
            self._prof.run_finish_hook()

    def run_finish_hook(self, run_command: bool = True) -> None:
        if run_command:
            self._prof.run_finish_hook()

    def step(self) -> None:
        """verl marks a step boundary inside a trace here; rlprof's captures are already per step."""

    def finalize(self) -> list[dict[str, Any]]:
        return self._prof.finalize()

    @property
    def profiler(self):
        """The underlying :class:`rlprof.Profiler`."""
        return self._prof

    @classmethod
    def annotate(cls, message: str | None = None, color: str | None = None, domain: str | None = None,
                 category: str | None = None, **kwargs_outer: Any) -> Callable:
        """Decorate a worker method; the worker holds the profiler in ``self.profiler`` (as in verl)."""

        def decorator(func: Callable) -> Callable:
            name = kwargs_outer.get("role") or message or func.__name__

            @functools.wraps(func)
            def wrapper(self_instance, *args, **kwargs):
                profiler = getattr(self_instance, "profiler", None)
                if not isinstance(profiler, DistProfiler):
                    return func(self_instance, *args, **kwargs)
                role, stage = split_role(str(name), profiler.role)
                with profiler._prof.role(role, stage):
                    return func(self_instance, *args, **kwargs)

            return wrapper

        return decorator


class DistProfilerExtension:
    """verl's worker mixin: ``start_profile``/``stop_profile``/``step_profile`` over ``self.profiler``."""

    def __init__(self, profiler: DistProfiler):
        self.profiler = profiler

    def start_profile(self, **kwargs: Any) -> None:
        self.profiler.start(**kwargs)

    def stop_profile(self, run_command: bool = True) -> None:
        self.profiler.stop(run_command=run_command)

    def step_profile(self) -> None:
        self.profiler.step()
