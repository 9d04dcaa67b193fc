"""The ``tool_config.precision_debugger`` section: verl's keys, as verl writes them, checked once.

Keys (verl 0.9.1's ``PrecisionDebuggerToolConfig``):

``config_path``  msprobe's own JSON config (task ``statistics`` or ``tensor``, level, scope...); null:
                 nothing can be dumped (each region says so with a skip; an error with ``strict``)
``stages``       which stages to dump, a subset of :data:`STAGES` (verl's names); null: all of them.
                 ``rollout_generate`` is accepted and never dumped, as in verl. Anything else is refused
                 with the allowed list.
``strict``       every "cannot dump" becomes an error: a ConfigError here, before training, for what can
                 be known now (no ``config_path``, a config file that cannot be read); during training
                 the hook raises, so the core records an error (and releases the backend)
``steps``        verl's deprecated step filter: accepted and ignored (``global_profiler.steps`` decides)

``name`` (verl's bookkeeping) is accepted and ignored (:mod:`rlprof.tool_config`). The core decides ranks,
steps and the capture mode; nothing here reads them.

Without msprobe (the ``mindstudio-probe`` package) the section is refused whatever ``strict`` says: the
tool cannot do anything, and the run must not start believing it will. Nothing here imports msprobe.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from typing import Any, Mapping

from rlprof.errors import ConfigError, fail
from rlprof.backend_api import check_keys, parse_bool

STAGES = {
    "actor_update": "actor_update",
    "actor_compute_log_prob": "actor_compute_log_prob",
    "ref_compute_log_prob": "ref_compute_log_prob",
    "compute_values": "critic_compute_values",
    "critic_update": "critic_update",
    "compute_rm_score": "reward_compute_rm_score",
}
"""verl's precision_debugger stage -> the rlprof region it is (``<role>_<stage>``: the verl drop-in
files verl's ``compute_values`` under the critic and ``compute_rm_score`` under the reward model)."""
NEVER_DUMPED = ("rollout_generate",)
"""Stages verl accepts in ``stages`` and never dumps (it warns); accepted here too, and ignored."""
MSPROBE_PACKAGE = "mindstudio-probe==26.2.0"
"""What provides msprobe (rlprof-msprobe's dependency), named when it is missing."""

KEYS = ("config_path", "stages", "strict")
IGNORED = ("steps",)


@dataclass(frozen=True)
class PrecisionSettings:
    """One section's validated settings."""

    config_path: str | None = None
    stages: tuple[str, ...] | None = None
    """verl's stage names to dump; None: every stage of :data:`STAGES`."""
    strict: bool = False

    @classmethod
    def of(cls, tool_config: Mapping[str, Any]) -> "PrecisionSettings":
        """The settings of a section :func:`precision_settings` already normalised (``ctx.tool_config``)."""
        stages = tool_config.get("stages")
        return cls(tool_config.get("config_path"), None if stages is None else tuple(stages), bool(tool_config.get("strict")))

    def stage_of(self, region: str) -> str | None:
        """The verl stage ``region`` is, when it is one to dump; else None."""
        for stage in STAGES if self.stages is None else self.stages:
            if STAGES.get(stage) == region:
                return stage
        return None

    def as_tool_config(self) -> dict[str, Any]:
        """The normalised mapping the core hands back as ``ctx.tool_config``; parsing it again gives the same."""
        return {"config_path": self.config_path, "stages": None if self.stages is None else list(self.stages),
                "strict": self.strict}


def precision_settings(tool_config: Mapping[str, Any], key_path: str = "tool_config.precision_debugger") -> PrecisionSettings:
    """Check ``tool_config`` (see the module docstring); raise :class:`rlprof.ConfigError` naming the key."""
    check_keys(tool_config, key_path, KEYS, IGNORED)
    config_path = tool_config.get("config_path")
    if config_path is not None and (not isinstance(config_path, str) or not config_path):
        raise fail(f"{key_path}.config_path", config_path, "the path of msprobe's JSON config, or null")
    settings = PrecisionSettings(config_path=config_path, stages=_stages(tool_config.get("stages"), f"{key_path}.stages"),
                                 strict=parse_bool(tool_config.get("strict"), f"{key_path}.strict"))
    if importlib.util.find_spec("msprobe") is None:
        raise ConfigError(f"{key_path}: precision_debugger needs msprobe, which is not installed: pip install "
                          f"{MSPROBE_PACKAGE} (the package rlprof-msprobe depends on)", key=key_path)
    if settings.strict:
        problem = config_problem(settings.config_path)
        if problem is not None:
            raise ConfigError(f"{key_path}.config_path: {problem}; allowed with strict=true: a readable msprobe JSON "
                              "config (strict turns every 'cannot dump' into an error)", key=f"{key_path}.config_path")
    return settings


def config_problem(config_path: str | None) -> str | None:
    """Why msprobe cannot run with ``config_path`` (not set, unreadable, not a JSON object), or None."""
    if config_path is None:
        return "config_path is null: msprobe needs its JSON config (task, level, scope)"
    try:
        with open(config_path, encoding="utf-8") as f:
            loaded = json.load(f)
    except (OSError, ValueError) as exc:
        return f"msprobe's config {config_path!r} cannot be read: {type(exc).__name__}: {exc}"
    if not isinstance(loaded, dict):
        return f"msprobe's config {config_path!r} holds {type(loaded).__name__}, not a JSON object"
    return None


def _stages(value: Any, key: str) -> tuple[str, ...] | None:
    allowed = f"null or a list drawn from {', '.join(STAGES)} ({', '.join(NEVER_DUMPED)} is accepted and never dumped)"
    if value is None:
        return None
    if not isinstance(value, (list, tuple)):
        raise fail(key, value, allowed)
    for stage in value:
        if stage not in STAGES and stage not in NEVER_DUMPED:
            raise fail(key, stage, allowed)
    return tuple(dict.fromkeys(s for s in value if s in STAGES))
