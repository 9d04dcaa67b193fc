"""``rlprof demo --tool precision_debugger``: the msprobe config the demo writes when the user gives none.

msprobe needs its own JSON config (``global_tool_config.precision_debugger.config_path``). The demo's is
the smallest that says something: the ``statistics`` task at level L0, so each layer call of the demo's
policy (``Module.embed.Embedding``, ``Module.rnn.GRU``, ``Module.head.Linear``) is listed with the dtype,
shape and max/min/mean/norm of its inputs, outputs and parameters; no tensor is saved whole. msprobe's
own ``rank``/``step`` filters stay empty: rlprof's plan decides those.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TOOL = "precision_debugger"
CONFIG_NAME = "msprobe_statistics.json"
STATISTICS = {"task": "statistics", "rank": [], "step": [], "level": "L0", "async_dump": False,
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}


def default_config_path(save_path: str) -> str:
    """Where the demo's config goes: beside the runs, absolute (the workers read it from their own directory)."""
    return str(Path(save_path).absolute() / CONFIG_NAME)


def add_default_config(config: dict[str, Any], save_path: str) -> None:
    """Name the demo's config in ``global_tool_config.precision_debugger`` (a user's override wins)."""
    sections = config["global_profiler"].setdefault("global_tool_config", {})
    sections.setdefault(TOOL, {})["config_path"] = default_config_path(save_path)


def write_default_config(config_path: str) -> None:
    """Write the demo's config to ``config_path`` (its ``dump_path`` is msprobe's fallback, never used:
    rlprof hands msprobe each region's own directory)."""
    path = Path(config_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**STATISTICS, "dump_path": str(path.parent / "msprobe-unused")}, indent=1) + "\n")
