"""What the backend asks torch_npu to do, per level x contents x mode, against the stand-in.

The expectations are the Ascend profiling guide's (shared/seeds/000, 001, 003), written out here
by hand rather than derived from the plugin:

* level: level_none/level0/level1/level2 -> ProfilerLevel.Level_none/Level0/Level1/Level2; absent -> level0
  (the guide: "Level 0 is recommended as the default configuration"); AI Core metrics from level1 on;
* contents: npu -> device activity, cpu -> host activity, memory -> profile_memory, shapes ->
  record_shapes, module -> with_modules, stack -> with_stack; empty -> "default cpu, npu";
  rlprof adds the CPU activity always (the region ranges are host events);
* end-to-end: one capture per profiled step holding every role's ranges; discrete: one capture per
  region; each capture writes a ``*_ascend_pt`` directory under its own output directory;
* every region is one mstx range, opened and closed inside its capture.
"""

from __future__ import annotations

import pytest
from npu_tiny_training import REGIONS, npu_config, train

ALL = ["npu", "cpu", "memory", "shapes", "module", "stack"]

LEVELS = {
    None: ("Level0", "ACL_AICORE_NONE"),
    "level_none": ("Level_none", "ACL_AICORE_NONE"),
    "level0": ("Level0", "ACL_AICORE_NONE"),
    "level1": ("Level1", "ACL_AICORE_PIPE_UTILIZATION"),
    "level2": ("Level2", "ACL_AICORE_PIPE_UTILIZATION"),
}
"""tool_config.npu.level -> (ProfilerLevel member, AiCMetrics member), as the real constants' values.
AI Core metrics come with level1 ("adds ... AI Core performance metrics"); below it torch_npu
itself resets them to none."""

CONTENTS = [
    # contents,           activities,       profile_memory, record_shapes, with_modules, with_stack
    ([],                   {"CPU", "NPU"},   False, False, False, False),
    (["npu"],              {"CPU", "NPU"},   False, False, False, False),
    (["cpu"],              {"CPU"},          False, False, False, False),
    (["npu", "cpu"],       {"CPU", "NPU"},   False, False, False, False),
    (ALL,                  {"CPU", "NPU"},   True,  True,  True,  True),
    (["memory"],           {"CPU"},          True,  False, False, False),
    (["shapes", "module"], {"CPU"},          False, True,  True,  False),
    (["npu", "stack"],     {"CPU", "NPU"},   False, False, False, True),
]

CAPTURES = {
    "e2e": [("step1", REGIONS, ["actor", "ref"]), ("step2", REGIONS, ["actor", "ref"])],
    "discrete": [(f"step{s}.{r}", (r,), [r.split("_")[0]]) for s in (1, 2) for r in REGIONS],
}
"""mode -> (capture id, its regions in order, roles in its manifest record) for steps [1, 2] of a 3-step run."""


def split_by_capture(calls):
    """The call log cut after each ``profile.stop``."""
    segments, current = [], []
    for call in calls:
        current.append(call)
        if call.name == "profile.stop":
            segments.append(current)
            current = []
    assert not current, f"calls after the last capture closed: {[c.name for c in current]}"
    return segments


@pytest.mark.parametrize("mode", ["e2e", "discrete"])
@pytest.mark.parametrize("level", list(LEVELS))
@pytest.mark.parametrize("contents,activities,memory,shapes,modules,stack", CONTENTS,
                         ids=["-".join(c[0]) or "empty" for c in CONTENTS])
def test_capture_arguments_order_paths_and_ranges(torch_npu_standin, tmp_path, monkeypatch, mode, level, contents,
                                                  activities, memory, shapes, modules, stack):
    monkeypatch.setenv("RLPROF_STRICT", "1")
    npu = {"contents": contents} if level is None else {"contents": contents, "level": level}
    prof = train(npu_config(tmp_path, npu=npu, mode=mode, steps=(1, 2)), n_steps=3)

    expected = CAPTURES[mode]
    segments = split_by_capture(torch_npu_standin.calls)
    assert len(segments) == len(expected)
    process = f"rank0-{prof.run.host}-{prof.run.pid}"
    for segment, (capture_id, regions, roles) in zip(segments, expected):
        names = [c.name for c in segment]
        ranges = ["mstx.range_start", "mstx.range_end"] * len(regions)
        assert sorted(names[:2]) == ["_ExperimentalConfig", "tensorboard_trace_handler"]
        assert names[2:] == ["profile", "profile.start", *ranges, "profile.stop"]
        first = {c.name: c for c in reversed(segment)}
        config, handler, profile = first["_ExperimentalConfig"], first["tensorboard_trace_handler"], first["profile"]

        assert (config.args["profiler_level"], config.args["aic_metrics"]) == LEVELS[level]
        assert config.args["export_type"] == ["db"]
        assert config.args["mstx"] is True
        output_dir = prof.run.run_dir / capture_id / process / "npu"
        assert handler.args == {"dir_name": str(output_dir), "worker_name": None, "analyse_flag": False}
        assert {a.name for a in profile.args["activities"]} == activities
        assert len(profile.args["activities"]) == len(activities)
        assert (profile.args["profile_memory"], profile.args["record_shapes"], profile.args["with_modules"],
                profile.args["with_stack"]) == (memory, shapes, modules, stack)
        assert profile.args["schedule"] is None and profile.args["with_flops"] is True  # tool_config.npu.flops: on by default

        starts = [c for c in segment if c.name == "mstx.range_start"]
        ends = [c for c in segment if c.name == "mstx.range_end"]
        assert [c.args["message"] for c in starts] == list(regions)
        assert [c.args["range_id"] for c in ends] == [c.args["range_id"] for c in starts]
        assert all(c.args["stream"] is None for c in starts)

        started = segment[names.index("profile.start")].args["prof_path"]
        assert started.startswith(str(output_dir) + "/") and started.endswith("_ascend_pt")

    records = [a for a in prof.artifacts if a["backend"] == "npu"]
    assert [(r["capture"], r["roles"], r["kind"], r["analysis"]) for r in records] == [
        (capture_id, roles, "ascend_pt", False) for capture_id, _, roles in expected
    ]
    for record, segment in zip(records, segments):
        started = next(c for c in segment if c.name == "profile.start").args["prof_path"]
        assert str(prof.run.run_dir / record["path"]) == started
        assert (prof.run.run_dir / record["path"]).is_dir()
