"""Issue 42: a plain Profiler with the torch backend gets each profiled step's split in its step metrics during
the run: its real torch.profiler trace is analysed in a child process as it is written, and the run's
step_metrics.jsonl has a ``split`` line per profiled step whose fractions are the breakdown's (the rows the
child left in the run's breakdown/ cache, which ``rlprof report`` reuses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof.analysis.rows_cache import _cached
from rlprof.analysis.late_split import pending, wait
from rlprof.step_metrics import SPLIT_STEP, read_step_metrics

WORKLOAD_SCRIPT = Path(__file__).with_name("torch_workload.py")
FRACS = ("compute_frac", "exposed_comm_frac", "exposed_memory_frac", "idle_frac")


def split_lines(run_dir):
    """The run's split lines, once the splits its process handed on as it ended are written (issue 49)."""
    assert wait(run_dir), pending(run_dir)
    return [r for r in read_step_metrics(run_dir / "step_metrics.jsonl") if r.kind == "split"]


def test_each_profiled_step_has_a_split_line_whose_fractions_are_the_breakdowns(run_training):
    run = run_training(steps=(1, 2, 3, 4))
    lines = split_lines(run.run_dir)
    assert [line.step for line in lines] == [1, 2]  # the profiled steps (1 and 2), each once, in order
    traces = run.files()
    assert len(traces) == 2
    rows = [row for trace in traces for row in _cached(str(trace)).rows]  # what the child analysed, cached where the report reads it
    for line in lines:
        assert line.metrics[SPLIT_STEP] == line.step
        for role, region, name in (("actor", "actor_update", "update"), ("ref", "ref_compute_log_prob", "compute_log_prob")):
            fracs = [line.metrics[f"rlprof/{role}/{name}/{frac}"] for frac in FRACS]
            assert sum(fracs) == pytest.approx(1.0, abs=1e-4)
            (row,) = [r for r in rows if r.step == line.step and r.region == region]
            assert fracs[0] == pytest.approx(row.compute_ms / row.window_ms, abs=1e-6)
            assert fracs[3] == pytest.approx(row.idle_ms / row.window_ms, abs=1e-6)
        assert not any(k.endswith("peak_allocated_bytes") for k in line.metrics)  # torch recorded no memory here


def test_the_trace_is_analysed_outside_the_training_process(make_config, tmp_path):
    """The training interpreter never imports the breakdown (the analysis ran in a child of its own)."""
    code = (f"import importlib.util, json, sys; spec = importlib.util.spec_from_file_location('w', {str(WORKLOAD_SCRIPT)!r}); "
            "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w); "
            f"w.main({{'config': {make_config()!r}, 'rank': 0, 'world_size': 1, 'run_id': 'r'}}); "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('rlprof.analysis'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert [line.step for line in split_lines(tmp_path / "profile" / "r")] == [1, 2]


def test_step_metrics_off_analyses_nothing(make_config, run_training):
    config = make_config()
    config["global_profiler"]["step_metrics"] = False
    run = run_training(config, steps=(1, 2, 3))
    assert run.files()  # the traces are written as always
    assert not (run.run_dir / "step_metrics.jsonl").exists()
    assert not (run.run_dir / "breakdown").exists()  # nobody analysed them


def test_with_contents_memory_each_regions_peak_reaches_the_split(run_training):
    """A user who asked for ``contents: [memory]`` gets each region's peak allocated memory with the split."""
    run = run_training(steps=(1, 2, 3), torch_config={"contents": ["cpu", "memory"]})
    assert [line.step for line in split_lines(run.run_dir)] == [1, 2]
    rows = [row for trace in run.files() for row in _cached(str(trace)).rows]
    for line in split_lines(run.run_dir):
        for role, region, name in (("actor", "actor_update", "update"), ("ref", "ref_compute_log_prob", "compute_log_prob")):
            (row,) = [r for r in rows if r.step == line.step and r.region == region]
            assert line.metrics[f"rlprof/{role}/{name}/peak_allocated_bytes"] == row.peak_allocated_bytes > 0


def test_finalize_waits_for_no_analysis_and_each_split_comes_after_the_run(run_training, monkeypatch):
    """Issue 49: with the in-run analysis held up (a slow trace, a loaded machine), finalize returns anyway; the
    traces are analysed outside the process and each profiled step's split reaches step_metrics.jsonl after the
    run, marked late, with its fractions and counted MFU; the report reads the rows that analysis cached."""
    import threading

    from rlprof.runtime import split_analyser

    held = threading.Event()
    monkeypatch.setattr(split_analyser, "analyse", lambda *args, **kwargs: held.wait(120) and {})
    try:
        run = run_training(steps=(1, 2, 3))  # returns while both analyses are held
        lines = split_lines(run.run_dir)
    finally:
        held.set()
    assert [line.step for line in lines] == [1, 2] and all(line.late for line in lines)
    for line in lines:
        assert sum(line.metrics[f"rlprof/actor/update/{frac}"] for frac in FRACS) == pytest.approx(1.0, abs=1e-4)
        assert 0 < line.metrics["rlprof/actor/update/mfu_compute"] <= 1
    assert all(_cached(str(trace)) is not None for trace in run.files())  # rows where the report reads them
