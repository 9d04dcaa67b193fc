"""The torch backend's hooks called directly, for what the plan never does but a backend must survive."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlprof.context import Capture, FinalizeContext, RoleContext, RunInfo, StepContext
from rlprof_torch.backend import TorchBackend


@pytest.fixture
def run(tmp_path) -> RunInfo:
    return RunInfo(run_id="r", rank=0, world_size=1, host="h", pid=1, run_dir=tmp_path, roles=("actor",))


def capture(run: RunInfo, capture_id: str) -> Capture:
    return Capture(capture_id=capture_id, steps=(1,), regions=(), directory=run.run_dir / capture_id)


def common(run: RunInfo, capture_id: str | None) -> dict:
    return {"run": run, "backend": "torch", "tool_config": {"contents": ()},
            "capture": capture(run, capture_id) if capture_id else None}


def profiling() -> bool:
    return torch._C._autograd._profiler_enabled()


def test_a_second_capture_is_refused_and_the_first_is_saved(run, read_trace):
    backend = TorchBackend()
    backend.start_step(StepContext(**common(run, "step1"), step=1, opens_capture=True))
    with pytest.raises(RuntimeError, match=r"capture 'step1.actor_update' opened while capture 'step1' was still recording") as caught:
        backend.start_role(RoleContext(**common(run, "step1.actor_update"), step=1, role="actor", region="actor_update",
                                       opens_capture=True))
    assert not profiling()
    saved = Path(str(caught.value).rsplit(" ", 1)[1])
    assert saved.is_file() and read_trace(saved).count("ProfilerStep#1") == 1


def test_finalize_stops_an_open_capture_and_closes_ranges_once(run, read_trace):
    backend = TorchBackend()
    backend.start_role(RoleContext(**common(run, "step1.actor_update"), step=1, role="actor", region="actor_update",
                                   opens_capture=True))
    assert profiling()
    path = backend.finalize(FinalizeContext(**common(run, None)))
    assert not profiling() and read_trace(path).count("actor_update") == 1
    assert backend.finalize(FinalizeContext(**common(run, None))) is None
