"""Analytic FLOPs every step (issue 49): ``Profiler.record_tokens`` turns a region's tokens into tokens per second,
model TFLOP/s and MFU over its window in the step's metrics, by a named formula, never above 100%."""

from __future__ import annotations

import json

import pytest

import rlprof
from rlprof import peak as peak_module

torch = pytest.importorskip("torch")

MODEL_PARAMETERS = 8 * 16 + 16 * 4


@pytest.fixture
def calibrated(monkeypatch):
    """The calibration stands at ``value`` TFLOP/s (set it before the run)."""
    monkeypatch.setattr(peak_module, "_resolved", {})
    monkeypatch.setattr(peak_module, "_measured", {})
    measured = {"tflops": 1.0}
    monkeypatch.setattr(peak_module, "calibrate", lambda device, dtype: measured["tflops"])
    return measured


def run(tmp_path, *extra, steps=3, tokens=1000, **given):
    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
        f"global_profiler.save_path={tmp_path}", "global_profiler.tool=torch", "global_profiler.steps=[]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    for step in range(1, steps + 1):
        prof.start_step(step)
        with prof.role("actor", "update"):
            model(torch.randn(4, 8)).sum().backward()
        prof.record_tokens("actor", "update", tokens, model=model, train=True, **given)
        prof.step_boundary()
    prof.finalize()
    path = prof.run.run_dir / "step_metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if '"kind": "step"' in line]


def test_each_step_has_tokens_per_second_model_tflops_and_mfu_over_the_window(tmp_path, calibrated):
    lines = run(tmp_path)
    assert [line["step"] for line in lines] == [1, 2, 3]
    for line in lines:
        m, work = line["metrics"], line["work"]["actor/actor_update"]
        seconds = m["rlprof/actor/update/slowest_s"]
        flops = 6 * MODEL_PARAMETERS * 1000
        assert (work["tokens"], work["flops"], work["formula"]) == (1000, flops, f"6N (dense, train; N={MODEL_PARAMETERS})")
        assert m["rlprof/actor/update/tokens_per_s"] == pytest.approx(1000 / seconds, rel=1e-4)
        assert m["rlprof/actor/update/model_tflops"] == pytest.approx(flops / seconds / 1e12, rel=1e-3)
        assert m["rlprof/actor/update/mfu_window"] == pytest.approx(flops / seconds / 1e12, rel=1e-3)  # the peak: 1 TFLOP/s
        assert work["peak"].startswith("measured 1 TFLOP/s") and work["mfu_window_measured"] == work["mfu_window"]


def test_a_peak_configured_ten_times_too_low_is_refused_with_the_reason(tmp_path, calibrated):
    calibrated["tflops"] = 0.05
    lines = run(tmp_path, "global_profiler.peak_tflops=0.005")
    work = lines[-1]["work"]["actor/actor_update"]
    assert "global_profiler.peak_tflops=0.005 is refused" in work["refused"] and "0.05" in work["refused"]
    assert work["peak"].startswith("measured 0.05 TFLOP/s")  # divided by what the device measured instead
    assert 0 <= lines[-1]["metrics"]["rlprof/actor/update/mfu_window"] <= 1


def test_a_figure_above_100_percent_is_left_out_and_what_is_inconsistent_named(tmp_path, calibrated):
    """A formula that claims 10^20 FLOPs for a region of milliseconds: beyond what the device measured it can do."""
    lines = run(tmp_path, flops=1e20, formula="planted")
    for line in lines:
        assert "rlprof/actor/update/mfu_window" not in line["metrics"]
        assert "rlprof/actor/update/tokens_per_s" in line["metrics"]  # the rest stands
        assert "the formula is inconsistent" in line["work"]["actor/actor_update"]["note"]


def test_a_role_not_timed_records_nothing(tmp_path, calibrated):
    calibrated["tflops"] = None  # never asked
    assert not (tmp_path / "never").exists()
    lines = run(tmp_path, "global_profiler.step_metrics=false")
    assert lines == []
