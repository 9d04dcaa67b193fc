"""What the plugin's tests dump: a small model, the call that runs it, and msprobe's statistics config."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path

import torch

STATISTICS = {"task": "statistics", "rank": [], "step": [], "level": "L0", "async_dump": False,
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
"""msprobe's statistics task at module level (L0): per layer call, each tensor's dtype, shape, max/min/mean/norm."""


def write_config(directory: Path, **changes) -> Path:
    path = Path(directory) / "msprobe_config.json"
    path.write_text(json.dumps({**STATISTICS, "dump_path": str(Path(directory) / "msprobe-default"), **changes}))
    return path


@functools.lru_cache(maxsize=None)
def shared_config() -> Path:
    """One statistics config for every test of a process: msprobe's debugger is one per process and keeps
    the config it was first made with (rlprof_msprobe.debugger), so tests that dump share this one."""
    return write_config(Path(tempfile.mkdtemp(prefix="rlprof-msprobe-config-")))


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def run(model: torch.nn.Module) -> None:
    model(torch.ones(2, 4)).sum().backward()
