"""What the compute achieved in the report (issue 49): analytic figures every step from the step metrics file,
counted ones beside them on profiled steps, and a framework's MFU beside rlprof's with where they differ."""

from __future__ import annotations

import json

import pytest

from rlprof.analysis.breakdown import Row
from rlprof.analysis.compute import compute_lines, compute_of

PEAK = "measured 0.1 TFLOP/s (cpu, fp32)"


def work(tokens, flops, seconds, mfu):
    return {"tokens": tokens, "flops": flops, "flops_per_token": flops / tokens, "formula": "6N (dense, train; N=10)",
            "peak": PEAK, "tokens_per_s": tokens / seconds, "model_tflops": flops / seconds / 1e12, "mfu_window": mfu,
            "mfu_window_measured": mfu, "note": None, "processes": 2, "refused": None}


def write_metrics(run_dir, lines):
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "step_metrics.jsonl", "w") as out:
        for line in lines:
            out.write(json.dumps({"type": "step_metrics", "run": "r", "metrics": {}, **line}) + "\n")


def split(step, rank, flops, window_ms, compute_ms, **extra):
    row = Row(path=f"/t/{rank}", rank=rank, step=step, region="actor_update", device="cpu", start_ms=0.0,
              end_ms=window_ms, wall_ms=window_ms, window_ms=window_ms, compute_ms=compute_ms,
              exposed_communication_ms=window_ms - compute_ms, exposed_memory_ms=0.0, idle_ms=0.0, memory_ms=0.0,
              overlap_ms=0.0, communication_ms=window_ms - compute_ms, flops=flops, peak_tflops=0.1,
              measured_tflops=0.1, peak_source=PEAK, **extra)
    from rlprof.row_model import derive

    derive(row)
    return row


def test_every_step_has_its_analytic_figures_and_a_profiled_step_its_counted_ones_beside(tmp_path):
    write_metrics(tmp_path / "r", [
        {"kind": "step", "step": 1, "work": {"actor/actor_update": work(100, 2e9, 1.0, 0.02)}},
        {"kind": "step", "step": 2, "work": {"actor/actor_update": work(100, 2e9, 0.5, 0.04)}},
    ])
    # step 2 profiled: each of 2 processes counted 0.95e9 FLOPs in a 500 ms window, 250 ms of it compute
    compute = compute_of([tmp_path / "r"], [split(2, rank, 0.95e9, 500.0, 250.0) for rank in (0, 1)])
    first, second = compute.regions
    assert (first.step, first.counted_flops, first.mfu_window) == (1, None, 0.02)
    assert second.counted_flops == 1.9e9 and second.difference == pytest.approx(2e9 / 1.9e9 - 1)
    assert second.counted_mfu_window == pytest.approx(1.9e9 / (2 * 0.5 * 0.1e12))
    assert second.counted_mfu_compute == pytest.approx(2 * second.counted_mfu_window)  # half the window computed
    text = "\n".join(compute_lines(type("Report", (), {"compute": compute})()))
    assert f"peak: {PEAK}" in text and "actor_update: " in text
    assert "step 2 (profiled): counted 1.9e+09 FLOPs over 2 processes; analytic 2e+09 (+5.3%); MFU window 1.9%, compute 3.8%" in text


def test_uncounted_compute_is_said_never_shown_as_a_low_mfu(tmp_path):
    write_metrics(tmp_path / "r", [{"kind": "step", "step": 1, "work": {}}])
    rows = [split(1, 0, 1e6, 500.0, 250.0, uncounted="aten::_scaled_dot_product_flash_attention_for_cpu")]
    (region,) = compute_of([tmp_path / "r"], rows).regions
    assert region.counted_mfu_compute is None and "lower bound" in region.counted_note


def test_verls_mfu_stands_beside_rlprofs_with_where_they_differ(tmp_path):
    write_metrics(tmp_path / "r", [
        {"kind": "step", "step": 2, "work": {"actor/actor_update": work(100, 2e9, 0.5, 0.04)}},
        {"kind": "framework", "step": 2, "metrics": {"perf/mfu/actor": 0.004}, "work": {"source": "verl", "peak_tflops": 0.448}},
    ])
    compute = compute_of([tmp_path / "r"], [split(2, rank, 1e9, 500.0, 250.0) for rank in (0, 1)])
    (framework,) = compute.framework
    assert (framework.region, framework.value) == ("actor_update", 0.004)
    why = framework.why()
    # rlprof 0.04 against verl 0.004: the peaks account for x4.48 (0.448 against 0.1), the FLOP/s for the rest
    assert "peaks x4.48" in why and f"FLOP/s x{0.04 / 0.004 / 4.48:.3g}" in why
    assert "over compute time alone (counted) 4% against 2% over the window" in why
    assert "analytic FLOPs +0.0% from the trace's count" in why
    assert framework.as_dict()["rlprof_mfu_window"] == 0.04
