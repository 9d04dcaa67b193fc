"""Fixtures of rlprof-torch's tests: a tiny actor/ref training loop driven through the real Profiler.

The backend is always selected by name (``global_profiler.tool``) and loaded through its entry
point, as in a real run; nothing here passes backend instances to the Profiler.
"""

from __future__ import annotations

import collections
import gzip
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import rlprof
from rlprof import notices

WORKLOAD_SCRIPT = Path(__file__).with_name("torch_workload.py")
"""The training loop, shared with tests that run it in other processes (loaded by path: no import-mode games)."""
_spec = importlib.util.spec_from_file_location("rlprof_torch_tests_workload", WORKLOAD_SCRIPT)
workload = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(workload)


@pytest.fixture(autouse=True)
def nothing_said_yet():
    """Each test starts as a fresh process would: :mod:`rlprof.notices` remembers per process what
    was said once, and a test that checks a warning must not find it said by an earlier test."""
    notices.forget()


def profiler_config(save_path: Path, *, tool: Any = "torch", steps=(1, 2), torch_config: dict | None = None,
                    actor: dict | None = None) -> dict:
    """A verl-shaped config: actor (ref follows it) profiled on every rank."""
    actor_section = {"enable": True, "all_ranks": True, "tool_config": {"torch": dict(torch_config or {})}}
    actor_section.update(actor or {})
    return {
        "global_profiler": {"tool": tool, "steps": list(steps), "save_path": str(save_path)},
        "actor_rollout_ref": {"actor": {"profiler": actor_section}},
    }


@dataclass
class TrainingRun:
    profiler: rlprof.Profiler
    artifacts: list[dict] = field(default_factory=list)

    @property
    def run_dir(self) -> Path:
        return self.profiler.run.run_dir

    def files(self, backend: str = "torch") -> list[Path]:
        return [self.run_dir / a["path"] for a in self.artifacts if a["backend"] == backend]

    def traces(self) -> list[tuple[dict, "Trace"]]:
        """(manifest record, trace) for every torch trace, in the order they were written."""
        return [(a, Trace.read(self.run_dir / a["path"])) for a in self.artifacts if a["backend"] == "torch"]


class Trace(dict):
    """A Chrome trace as torch.profiler writes it (the top-level JSON object)."""

    @classmethod
    def read(cls, path: Path) -> "Trace":
        assert path.name.endswith(".json.gz"), path
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return cls(json.load(handle))

    @property
    def events(self) -> list[dict]:
        return self["traceEvents"]

    def annotations(self) -> collections.Counter:
        """How often each ``record_function`` range (``user_annotation`` event) occurs."""
        return collections.Counter(e["name"] for e in self.events if e.get("cat") == "user_annotation")

    def count(self, name: str) -> int:
        return self.annotations()[name]


@pytest.fixture
def make_config(tmp_path):
    """``make_config(tool="torch", steps=(1, 2), torch_config=None, actor=None) -> dict`` saving under tmp_path."""
    return lambda **kwargs: profiler_config(tmp_path / "profile", **kwargs)


@pytest.fixture
def run_training(make_config):
    """``run_training(config=None, *, rank=0, world_size=1, steps=(1, 2, 3), micro_batches=2, device="cpu", **config_kwargs)``:
    builds a Profiler for a process hosting actor and ref, trains, finalizes, returns a :class:`TrainingRun`.
    ``steps`` are the steps trained; ``config_kwargs`` go to :func:`profiler_config` (profiled: [1, 2])."""

    def run(config: dict | None = None, *, rank: int = 0, world_size: int = 1, steps=(1, 2, 3), micro_batches: int = 2,
            run_id: str | None = None, device: str = "cpu", **config_kwargs) -> TrainingRun:
        config = config or make_config(**config_kwargs)
        prof = rlprof.Profiler(config, rank=rank, world_size=world_size, roles=("actor", "ref"), run_id=run_id)
        workload.train(prof, steps=steps, micro_batches=micro_batches, device=device)
        return TrainingRun(prof, list(prof.finalize()))

    return run


@pytest.fixture
def read_trace():
    """``read_trace(path) -> Trace``."""
    return Trace.read


@pytest.fixture
def run_ranks():
    """``run_ranks(config, world_size=, run_id=)``: the same training, one fresh interpreter per rank,
    all at once (as a job's ranks run); fails with the rank's stderr if one of them fails."""
    import subprocess
    import sys

    def run(config: dict, *, world_size: int, run_id: str) -> None:
        processes = []
        for rank in range(world_size):
            spec = json.dumps({"config": config, "rank": rank, "world_size": world_size, "run_id": run_id})
            processes.append(subprocess.Popen([sys.executable, str(WORKLOAD_SCRIPT), spec],
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for rank, process in enumerate(processes):
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, f"rank {rank} failed:\n{stderr}"

    return run
