"""The ``tool_config.npu`` section: what users write, checked and normalised once.

Keys (verl's ``NPUToolConfig``; meanings from verl's Ascend profiling guide):

``level``        ``level_none`` | ``level0`` (default, the guide's recommendation) | ``level1`` | ``level2``
``contents``     a list drawn from ``npu, cpu, memory, shapes, module, stack``; empty = ``[npu, cpu]``
``analysis``     parse each capture when it closes (default false: parse later with ``rlprof npu-analyse``)
``export_type``  ``db`` (default, what verl writes) | ``text``, or a list of both
``flops``        rlprof's own: ask torch_npu for FLOPs (``with_flops``; default true), for each region's counted
                 FLOPs and MFU in the breakdown (docs/analysis.md, "What the compute achieves")

``name`` (newer verl configs carry ``name: npu``) is accepted and ignored (:mod:`rlprof.tool_config`).
The core has already removed its own keys (``_target_``, ``profile_token_start``/``end`` and the
capture-mode switch).

Validation runs in ``rlprof check`` and at Profiler creation, also where torch_npu is absent, so
nothing here imports it; :mod:`rlprof_npu.capture` maps these names onto torch_npu's objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from rlprof.errors import fail
from rlprof.backend_api import check_keys, parse_bool, parse_contents

LEVELS = ("level_none", "level0", "level1", "level2")
CONTENTS = ("npu", "cpu", "memory", "shapes", "module", "stack")
EXPORT_TYPES = ("db", "text")

DEFAULT_LEVEL = "level0"
DEFAULT_CONTENTS = ("npu", "cpu")
"""What an empty (or absent) ``contents`` collects: the guide's "default cpu, npu", also torch_npu's own
fallback when given no activities (verl's default config writes ``contents: []``)."""
DEFAULT_ANALYSIS = False
DEFAULT_EXPORT_TYPES = ("db",)

KEYS = ("level", "contents", "analysis", "export_type", "flops")


@dataclass(frozen=True)
class NpuSettings:
    """One role's validated npu settings; ``contents`` is already the effective set."""

    level: str = DEFAULT_LEVEL
    contents: tuple[str, ...] = DEFAULT_CONTENTS
    analysis: bool = DEFAULT_ANALYSIS
    export_types: tuple[str, ...] = DEFAULT_EXPORT_TYPES
    flops: bool = True

    def as_tool_config(self) -> dict[str, Any]:
        """The normalised mapping the core hands back as ``ctx.tool_config``; parsing it again
        gives the same settings."""
        return {
            "level": self.level,
            "contents": list(self.contents),
            "analysis": self.analysis,
            "export_type": list(self.export_types),
            "flops": self.flops,
        }


def npu_settings(tool_config: Mapping[str, Any], key_path: str = "tool_config.npu") -> NpuSettings:
    """Check ``tool_config`` and return its settings.

    :raises rlprof.ConfigError: for an unknown key or a bad value, naming ``key_path``, the value
        and what is allowed.
    """
    check_keys(tool_config, key_path, used=KEYS)
    return NpuSettings(
        level=_level(tool_config.get("level"), f"{key_path}.level"),
        contents=parse_contents(tool_config.get("contents"), f"{key_path}.contents", CONTENTS) or DEFAULT_CONTENTS,
        analysis=parse_bool(tool_config.get("analysis"), f"{key_path}.analysis", DEFAULT_ANALYSIS),
        export_types=_export_types(tool_config.get("export_type"), f"{key_path}.export_type"),
        flops=parse_bool(tool_config.get("flops"), f"{key_path}.flops", True),
    )


def _level(value: Any, key: str) -> str:
    if value is None:
        return DEFAULT_LEVEL
    if value not in LEVELS:
        raise fail(key, value, ", ".join(LEVELS))
    return value


def _export_types(value: Any, key: str) -> tuple[str, ...]:
    allowed = f"{' or '.join(EXPORT_TYPES)}, or a non-empty list of them"
    if value is None:
        return DEFAULT_EXPORT_TYPES
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not values or any(v not in EXPORT_TYPES for v in values):
        raise fail(key, value, allowed)
    return tuple(t for t in EXPORT_TYPES if t in values)
