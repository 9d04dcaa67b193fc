"""The ranges and windows a real NVTX tool sees, on CPU.

Each profiled loop runs in its own process with the project's NVTX recorder attached through
NVTX_INJECTION64_PATH, the mechanism nsys itself uses; the recorder writes every NVTX call. The
capture windows (cudaProfilerStart/Stop) cannot happen without CUDA, so they are checked through
the ``capture <id> start``/``end`` marks the backend emits at each window and its own count, which
must equal the N the controller hands to nsys (``capture-range-end=repeat-shutdown:N``).
"""

from __future__ import annotations

from nsys_harness import verl_config
from rlprof_nsys.ranges import ROLE_COLORS, STEP_COLOR

REGIONS = [["ref", "compute_log_prob", 0], ["actor", "update", 0]]
STAGES = {"actor": ["update"], "ref": ["compute_log_prob"]}
TWO_REGIONS = ["ref_compute_log_prob", "actor_update"]


def spec(config, *, rank=0, world_size=1, run_steps=(1, 2, 3, 4), **extra):
    return {"config": config, "rank": rank, "world_size": world_size, "roles": ["actor", "ref"], "stages": STAGES,
            "run_id": "capture-test", "run_steps": list(run_steps), "regions": REGIONS, "without_torch": True, **extra}


def nsight(loop):
    return loop.result["worker_options"]["runtime_env"]["nsight"]


def test_end_to_end_ranges_on_the_selected_rank_and_steps_only(profiled, tmp_path):
    config = verl_config(tmp_path / "out", steps=[1, 3], ranks=[1])
    unselected, selected = profiled(spec(config, rank=0, world_size=2), spec(config, rank=1, world_size=2))

    rec = selected.recording
    assert rec.outline() == [("step1", TWO_REGIONS), ("step3", TWO_REGIONS)]
    assert {e["pid"] for e in rec.in_domain} == {selected.result["pid"]}
    assert rec.windows() == ["step1", "step3"]
    assert rec.marks().count("capture step1 end") == rec.marks().count("capture step3 end") == 1
    assert selected.result["windows_opened"] == selected.result["expected_captures"] == 2
    assert selected.result["windows_started"] == 0  # no torch here: counted, not started
    assert selected.stderr.count("capture windows (cudaProfilerStart/Stop) are skipped") == 1  # one notice, two windows
    assert nsight(selected)["capture-range"] == "cudaProfilerApi"
    assert nsight(selected)["capture-range-end"] == "repeat-shutdown:2"

    roots, _ = rec.ranges()
    assert [r.color for r in roots] == [STEP_COLOR, STEP_COLOR]
    assert [(c.name, c.color) for c in roots[0].children] == [("ref_compute_log_prob", ROLE_COLORS["ref"]),
                                                               ("actor_update", ROLE_COLORS["actor"])]
    named = {e["msg"] for e in rec.in_domain if e["ev"] == "name_category"}
    assert named == {"step", "ref", "actor"}
    # the form every Nsight Systems from 2022.4 on records: domain start/end ranges with ASCII messages,
    # through the tool's CORE2 callbacks; no registered strings (windows with capture_range cudaProfilerApi),
    # no push/pop, no payload-extension queries
    assert {"DomainCreateA", "DomainRangeStartEx", "DomainRangeEnd", "DomainMarkEx"} <= rec.apis
    assert not rec.apis & {"DomainRegisterStringA", "DomainRangePushEx", "DomainRangePop", "RangePushA", "RangeStartA"}

    assert unselected.result["active"] is False
    assert unselected.recording.in_domain == []
    assert unselected.result["windows_opened"] == 0
    assert unselected.result["worker_options"] == {}  # no nsys for a worker that captures nothing


def test_discrete_one_window_per_region_inside_its_step(profiled, tmp_path):
    config = verl_config(tmp_path / "out", steps=[2], mode="discrete")
    (loop,) = profiled(spec(config, run_steps=(1, 2, 3)))

    rec = loop.recording
    assert rec.outline() == [("step2", TWO_REGIONS)]
    assert rec.windows() == ["step2.ref_compute_log_prob", "step2.actor_update"]
    assert loop.result["windows_opened"] == loop.result["expected_captures"] == 2
    assert nsight(loop)["capture-range-end"] == "repeat-shutdown:2"
    # each window opens before its region's range starts and closes after it ends
    sequence = [(e["ev"], e["msg"]) for e in rec.in_domain if e["ev"] in ("start", "end", "mark")]
    for capture, region in zip(rec.windows(), TWO_REGIONS):
        opened, closed = sequence.index(("mark", f"capture {capture} start")), sequence.index(("mark", f"capture {capture} end"))
        assert opened < sequence.index(("start", region)) < sequence.index(("end", region)) < closed


def test_continuous_steps_share_one_window(profiled, tmp_path):
    config = verl_config(tmp_path / "out", steps=[1, 2, 4], continuous=True)
    (loop,) = profiled(spec(config, run_steps=(1, 2, 3, 4, 5)))

    rec = loop.recording
    assert rec.outline() == [("step1", TWO_REGIONS), ("step2", TWO_REGIONS), ("step4", TWO_REGIONS)]
    assert rec.windows() == ["step1-2", "step4"]
    assert loop.result["windows_opened"] == loop.result["expected_captures"] == 2
    assert nsight(loop)["capture-range-end"] == "repeat-shutdown:2"


def test_a_region_that_raises_still_closes_its_range_and_window(profiled, tmp_path):
    config = verl_config(tmp_path / "out", steps=[1, 2], mode="discrete")
    (loop,) = profiled(spec(config, run_steps=(1, 2), raise_in="actor_update", raise_at_step=1))

    assert loop.result["caught"] == ["actor_update at step 1"]
    assert loop.result["errors"] == []
    rec = loop.recording
    assert rec.outline() == [("step1", TWO_REGIONS), ("step2", TWO_REGIONS)]
    starts = [m for m in rec.marks() if m.endswith(" start")]
    ends = [m for m in rec.marks() if m.endswith(" end")]
    assert len(starts) == len(ends) == loop.result["windows_opened"] == 4
