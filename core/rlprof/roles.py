"""The roles of a verl-style job and where each one's ``profiler`` section lives in verl's config.

Its own module because both :mod:`rlprof.config` (reading) and :mod:`rlprof.config.legacy` (migrating,
writing back in verl's layout) need it, and every tool that builds a config from flags (the demo, the
testing kit) nests sections the same way: :func:`nest_profiler` is that one way.
"""

from __future__ import annotations

from typing import Any, MutableMapping

ROLES = ("actor", "rollout", "ref", "critic", "reward")
"""Roles in canonical order (the first selected hosted role owns an end-to-end capture's tool_config)."""

ROLE_PATHS = {
    "actor": "actor_rollout_ref.actor",
    "rollout": "actor_rollout_ref.rollout",
    "ref": "actor_rollout_ref.ref",
    "critic": "critic",
    "reward": "reward_model",
}
"""Where each role's section is in verl's trainer config; its profiler section is ``<path>.profiler``."""

FOLLOWS_ACTOR = ("rollout", "ref")
"""Roles whose ``profiler`` section, when absent, is the actor's (verl's rule)."""


def profiler_path(role: str) -> str:
    """``actor_rollout_ref.actor.profiler``: the key path of ``role``'s profiler section."""
    return f"{ROLE_PATHS[role]}.profiler"


def nest_profiler(doc: MutableMapping[str, Any], role: str, section: Any) -> MutableMapping[str, Any]:
    """Put ``section`` at ``role``'s profiler path inside ``doc`` (a plain dict in verl's layout),
    creating the enclosing mappings; returns ``doc``. Sections already there for other keys stay."""
    node = doc
    for part in ROLE_PATHS[role].split("."):
        node = node.setdefault(part, {})
    node["profiler"] = section
    return doc
