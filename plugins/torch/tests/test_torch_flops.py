"""Counted FLOPs (issue 49): the torch backend asks torch.profiler for FLOPs unless ``tool_config.torch.flops`` is
false, and each region's breakdown row counts the matrix products that began in it, exactly as their shapes say,
with its FLOP/s and MFU; compute no formula counts (an attention kernel) is named, never shown as a low MFU."""

from __future__ import annotations

import pytest

from rlprof.analysis.breakdown_files import claim, file_rows, readers

# the workload's model (torch_workload.py): Linear(32, 64) -> ReLU -> Linear(64, 8) on a batch of 16
FORWARD = 2 * 16 * 32 * 64 + 2 * 16 * 64 * 8
BACKWARD = 2 * 32 * 16 * 64 + 2 * 16 * 8 * 64 + 2 * 64 * 16 * 8  # weight grads of both layers, input grad of the second


def rows_of(run):
    answers, _ = readers()
    out = []
    for path in run.files():
        target, _ = claim(path, answers)
        out += file_rows(str(path), target).rows
    return out


def test_each_regions_counted_flops_are_its_matrix_products_by_their_shapes(run_training):
    run = run_training(steps=(1, 2), micro_batches=3)
    rows = rows_of(run)
    for step in (1, 2):
        (ref,) = [r for r in rows if r.step == step and r.region == "ref_compute_log_prob"]
        (update,) = [r for r in rows if r.step == step and r.region == "actor_update"]
        assert ref.flops == FORWARD
        assert update.flops == 3 * (FORWARD + BACKWARD)
        for row in (ref, update):
            assert row.flops_per_s_compute >= row.flops_per_s_window > 0
            assert row.peak_source.startswith("measured") and "fp32" in row.peak_source  # a CPU: no spec
            assert row.mfu_compute == pytest.approx(row.flops_per_s_compute / (row.peak_tflops * 1e12))
            assert 0 < row.mfu_window <= row.mfu_compute <= 1 and row.mfu_note is None


def test_flops_false_asks_torch_for_none(run_training, read_trace):
    run = run_training(steps=(1,), torch_config={"flops": False})
    (trace,) = [read_trace(path) for path in run.files()]
    assert "with_flops" not in trace
    assert "Input Dims" not in str(trace.events[:200])  # nor the shapes FLOPs come from
    assert all(r.flops is None and r.mfu_compute is None for r in rows_of(run))


def test_attention_no_formula_counts_is_named_and_gets_no_mfu(make_config, tmp_path):
    import torch

    import rlprof

    prof = rlprof.Profiler(make_config(steps=(1,)), rank=0, world_size=1, roles=("actor",))
    q = torch.randn(2, 4, 64, 16)
    prof.start_step(1)
    with prof.role("actor", "update"):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
        torch.mm(torch.randn(8, 8), torch.randn(8, 8))
    prof.step_boundary()
    artifacts = prof.finalize()
    path = prof.run.run_dir / next(a["path"] for a in artifacts if a["backend"] == "torch")
    answers, _ = readers()
    (row,) = [r for r in file_rows(str(path), claim(path, answers)[0]).rows if r.region == "actor_update"]
    assert row.flops == 2 * 8 * 8 * 8  # the mm; SDPA's flash kernel is counted by nobody
    assert "scaled_dot_product" in row.uncounted
    assert row.mfu_compute is None and row.mfu_window is None and "lower bound" in row.mfu_note
