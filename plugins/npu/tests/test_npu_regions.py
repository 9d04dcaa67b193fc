"""Regions that do not go as planned: one that raises, and one nested inside another in discrete
mode (torch_npu runs one profiler per process; the core makes the inner region a range of the outer
capture, so the backend never sees a capture opened inside another)."""

from __future__ import annotations

import logging

import pytest
from npu_tiny_training import npu_config

import rlprof


def test_a_region_that_raises_still_closes_its_range_and_capture(torch_npu_standin, tmp_path, monkeypatch):
    monkeypatch.setenv("RLPROF_STRICT", "1")
    prof = rlprof.Profiler(npu_config(tmp_path, mode="discrete", steps=(1,)), roles=("actor",))
    prof.start_step(1)
    with pytest.raises(ZeroDivisionError):
        with prof.role("actor", "update"):
            1 / 0
    prof.step_boundary()
    prof.finalize()
    assert [c.name for c in torch_npu_standin.calls][-4:] == ["profile.start", "mstx.range_start", "mstx.range_end", "profile.stop"]
    assert [a["capture"] for a in prof.artifacts] == ["step1.actor_update"]


def test_a_region_nested_in_a_discrete_capture_is_a_range_of_it(torch_npu_standin, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RLPROF_STRICT", "1")
    caplog.set_level(logging.WARNING)
    prof = rlprof.Profiler(npu_config(tmp_path, mode="discrete", steps=(1,)), roles=("actor", "ref"))
    for step in (1, 2):
        prof.start_step(step)
        with prof.role("actor", "update"):
            with prof.role("ref", "compute_log_prob"):
                pass
        prof.step_boundary()
    prof.finalize()
    names = [c.name for c in torch_npu_standin.calls]
    assert names[names.index("profile"):] == [
        "profile", "profile.start",
        "mstx.range_start", "mstx.range_start", "mstx.range_end", "mstx.range_end",
        "profile.stop",
    ]
    assert [c.args["message"] for c in torch_npu_standin.named("mstx.range_start")] == ["actor_update", "ref_compute_log_prob"]
    assert [a["capture"] for a in prof.artifacts] == ["step1.actor_update"]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]  # nothing to warn about


def test_a_second_profiler_of_the_run_and_rank_lists_only_what_its_own_capture_wrote(torch_npu_standin, tmp_path):
    """Two Profilers of one run and rank in one process, one after the other (a worker set up twice, issue 40):
    their captures share a directory; each lists its own ``*_ascend_pt`` directory, none the other's, so the
    manifest lists every directory once."""
    config = npu_config(tmp_path, mode="discrete", steps=(1,))
    listed = []
    for _ in range(2):
        prof = rlprof.Profiler(config, roles=("actor",), run_id="twice")
        prof.start_step(1)
        with prof.role("actor", "update"):
            pass
        prof.step_boundary()
        listed.append([a["path"] for a in prof.finalize()])
    written = [c.args["prof_path"] for c in torch_npu_standin.named("profile.start")]
    run_dir = prof.run.run_dir
    assert [[str(run_dir / p) for p in paths] for paths in listed] == [[written[0]], [written[1]]]
