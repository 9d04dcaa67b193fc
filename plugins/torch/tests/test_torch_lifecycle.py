"""The torch backend's hooks called directly, and the capture rules the core guarantees it."""

from __future__ import annotations


import pytest
import torch

import rlprof
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


def test_a_region_nested_in_a_discrete_capture_is_a_range_of_the_outer_trace(make_config, read_trace):
    """The core never asks for a capture inside a capture: the inner region is a range of the outer trace."""
    prof = rlprof.Profiler(make_config(torch_config={"discrete": True}), roles=("actor", "ref"))
    for step in (1, 2):
        prof.start_step(step)
        with prof.role("actor", "update"):
            with prof.role("ref", "compute_log_prob"):
                torch.ones(4).sum()
        prof.step_boundary()
    artifacts = prof.finalize()
    assert not prof.errors and not profiling()
    assert [a["capture"] for a in artifacts] == ["step1.actor_update", "step2.actor_update"]
    for record in artifacts:
        trace = read_trace(prof.run.run_dir / record["path"])
        assert trace.count("actor_update") == 1 and trace.count("ref_compute_log_prob") == 1


def test_finalize_stops_an_open_capture_and_closes_ranges_once(run, read_trace):
    backend = TorchBackend()
    backend.start_role(RoleContext(**common(run, "step1.actor_update"), step=1, role="actor", region="actor_update",
                                   opens_capture=True))
    assert profiling()
    ctx = FinalizeContext(**common(run, None))
    backend.finalize(ctx)
    (path, _, writing), (same, _, written) = ctx._artifacts  # listed as it closed, and once written
    assert path == same and writing["state"] == "writing" and written["state"] == "written"
    assert not profiling() and read_trace(path).count("actor_update") == 1
    again = FinalizeContext(**common(run, None))
    assert backend.finalize(again) is None and again._artifacts is None


def test_a_capture_finalized_from_another_thread_is_given_up_not_stopped_there(make_config):
    """Seen: a verl replica's exit handler finalized on the main thread while its capture, started on the
    server's event-loop thread, waited to close; Kineto found no session there ("disableProfiler called but
    no active profiling session found") and exporting what it gave crashed the process (SIGSEGV in
    ActivityTraceWrapper::save). Now that capture is an error naming it, and the process goes on."""
    import threading

    prof = rlprof.Profiler(make_config(), roles=("actor",))
    started = threading.Thread(target=lambda: (prof.start_step(1), prof._step))  # the capture opens on this thread
    started.start()
    started.join()
    artifacts = prof.finalize()  # on the main thread: not the one that started torch.profiler
    assert not [a for a in artifacts if a.get("state") == "written"]
    (error,) = prof.errors
    assert "OtherThread" in str(error) or "cannot be stopped from thread" in str(error)
    assert "step1" in str(error)
