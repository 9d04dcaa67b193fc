"""N in ``capture-range-end=repeat-shutdown:N``, across plans, against the windows a run really opens.

N comes from the controller (``rlprof.ray.worker_options`` -> the ``worker_runtime_env`` hook, from
``ProcessPlan.expected_captures``); the windows come from running the plan in a Profiler with a
counting stand-in for cudaProfilerStart/Stop. nsys writes nothing until N windows closed and ignores
any window after the N-th, so the two numbers must be equal in every row.
"""

from __future__ import annotations

import logging

import pytest

import rlprof
from nsys_harness import verl_config
from rlprof.ray import worker_options
from rlprof_nsys.windows import CaptureWindows


class CountingDriver:
    """Stands in for CUDA's profiler API: counts start/stop and checks they alternate."""

    def __init__(self):
        self.starts = self.stops = 0

    def start(self):
        assert self.starts == self.stops, "cudaProfilerStart while a window is open"
        self.starts += 1

    def stop(self):
        assert self.starts == self.stops + 1, "cudaProfilerStop without an open window"
        self.stops += 1


def run_plan(config, *, roles, stages, run_steps, iterations=0, rank=0, world_size=1):
    """Run the trainer loop the plan describes; returns (nsight options or None, windows opened, driver)."""
    options = worker_options(config, rank, world_size, roles, stages)
    prof = rlprof.Profiler(config, rank=rank, world_size=world_size, roles=roles, stages=stages, run_id="windows")
    driver = CountingDriver()
    if prof.backends is not None:
        prof.backends.plugins["nsys"].windows = CaptureWindows(driver)
    for step in run_steps:
        prof.start_step(step)
        for role in roles:
            for stage in stages[role]:
                with prof.role(role, stage):
                    for _ in range(iterations):
                        with prof.iteration():
                            pass
        prof.step_boundary()
    prof.finalize()
    assert prof.errors == []
    opened = prof.backends.plugins["nsys"].windows_opened if prof.backends is not None else 0
    return options.get("runtime_env", {}).get("nsight"), opened, driver


HYBRID = {"actor": ["compute_log_prob", "update"], "ref": ["compute_log_prob"]}
ONE_EACH = {"actor": ["update"], "ref": ["compute_log_prob"]}

# (id, verl_config kwargs, stages, steps the trainer runs, iterations per region, rank/world, expected N)
TABLE = [
    ("e2e", dict(steps=[1, 2, 5]), ONE_EACH, range(1, 7), 0, (0, 1), 3),
    ("e2e_continuous", dict(steps=[1, 2, 5], continuous=True), ONE_EACH, range(1, 7), 0, (0, 1), 2),
    ("e2e_continuous_one_run", dict(steps=[2, 3, 4], continuous=True), ONE_EACH, range(1, 7), 0, (0, 1), 1),
    ("discrete", dict(steps=[1, 2, 5], mode="discrete"), ONE_EACH, range(1, 7), 0, (0, 1), 6),
    ("discrete_hybrid_engine", dict(steps=[2, 4], mode="discrete"), HYBRID, range(1, 6), 0, (0, 1), 6),
    ("rank_selected", dict(steps=[1, 3], ranks=[1, 3]), ONE_EACH, range(1, 4), 0, (3, 4), 2),
    ("rank_not_selected", dict(steps=[1, 3], ranks=[1, 3]), ONE_EACH, range(1, 4), 0, (2, 4), None),
    ("discrete_schedule_windows", dict(steps=[1, 2], mode="discrete", schedule={"wait": 1, "active": 2, "repeat": 2}),
     ONE_EACH, range(1, 3), 8, (0, 1), 8),
    ("discrete_schedule_first_only", dict(steps=[3], mode="discrete", schedule={"active": 1}),
     ONE_EACH, range(1, 4), 16, (0, 1), 2),
    ("e2e_schedule", dict(steps=[1, 2], schedule={"active": 1}), ONE_EACH, range(1, 3), 4, (0, 1), 2),
]


@pytest.mark.parametrize("case", TABLE, ids=[row[0] for row in TABLE])
def test_repeat_shutdown_n_equals_the_windows_opened(case, tmp_path, monkeypatch):
    monkeypatch.setenv("RLPROF_STRICT", "1")
    _, config_kwargs, stages, run_steps, iterations, (rank, world_size), expected = case
    config = verl_config(tmp_path / "out", **config_kwargs)
    nsight, opened, driver = run_plan(config, roles=("actor", "ref"), stages=stages, run_steps=run_steps,
                                      iterations=iterations, rank=rank, world_size=world_size)
    if expected is None:
        assert nsight is None and opened == 0 and driver.starts == 0
        return
    assert nsight["capture-range-end"] == f"repeat-shutdown:{expected}"
    assert opened == driver.starts == driver.stops == expected


@pytest.mark.parametrize("why, config_kwargs, stages", [
    ("discrete without declared stages", dict(steps=[1], mode="discrete"), None),
    ("a schedule that repeats without end", dict(steps=[1], mode="discrete", schedule={"active": 1, "repeat": 0}), ONE_EACH),
])
def test_uncountable_plans_fall_back_to_repeat_with_a_warning(why, config_kwargs, stages, tmp_path, caplog):
    config = verl_config(tmp_path / "out", **config_kwargs)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        options = worker_options(config, 0, 1, ("actor", "ref"), stages)
    assert options["runtime_env"]["nsight"]["capture-range-end"] == "repeat"
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "cannot count" in warning and "only when the worker process exits" in warning
