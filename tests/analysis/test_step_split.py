"""Issue 42: ``python -m rlprof.cli.step_split`` turns one trace's breakdown rows into the step metrics'
split per step and role region: only rlprof's role regions, each under its role, a region seen twice adding
up, a row of no step given to the capture's one step, the peak the largest where the trace recorded memory."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

from rlprof.analysis.step_split import role_of, step_figures


def row(region, step, compute=1.0, comm=0.0, memory=0.0, idle=1.0, peak=None):
    fields = dict(region=region, step=step, compute_ms=compute, exposed_communication_ms=comm,
                  exposed_memory_ms=memory, idle_ms=idle, window_ms=compute + comm + memory + idle)
    if peak is not None:  # a breakdown with the peak column
        fields["peak_allocated_bytes"] = peak
    return SimpleNamespace(**fields)


def test_a_region_belongs_to_the_longest_role_it_is_or_begins_with():
    roles = ("actor", "rollout", "ref", "reward", "reward_model")
    assert role_of("actor_update", roles) == "actor"
    assert role_of("ref", roles) == "ref"
    assert role_of("reward_model_score", roles) == "reward_model"
    assert role_of("refine", roles) is None and role_of("ProfilerStep#2", roles) is None and role_of("(trace)", roles) is None


def test_role_regions_per_step_add_up_and_keep_the_largest_peak():
    rows = [row("ProfilerStep#2", 2), row("actor_update", 2, peak=30.0), row("actor_update", 2, compute=3.0, peak=10.0),
            row("micro_batch", 2), row("ref_compute_log_prob", None, idle=2.0), row("(trace)", None)]
    got = step_figures(rows, ("actor", "ref"), steps=(2,))
    assert set(got) == {2} and set(got[2]) == {("actor", "actor_update"), ("ref", "ref_compute_log_prob")}
    update = got[2]["actor", "actor_update"]
    assert (update["compute_ms"], update["idle_ms"], update["window_ms"], update["peak_allocated_bytes"]) == (4.0, 2.0, 6.0, 30.0)
    assert got[2]["ref", "ref_compute_log_prob"]["peak_allocated_bytes"] is None  # no memory recorded
    assert step_figures(rows[4:], ("ref",), steps=(2, 3)) == {}  # two steps: a row of no step is neither's


def test_the_program_answers_in_one_json_line_and_a_bad_file_is_one_reason(tmp_path):
    bad = tmp_path / "rank0.pt.trace.json.gz"
    bad.write_bytes(b"not gzip")
    other = tmp_path / "snapshot.pickle"
    other.write_bytes(b"x")
    run = lambda path: subprocess.run([sys.executable, "-m", "rlprof.cli.step_split", str(path), "--roles", "actor",
                                       "--steps", "1"], capture_output=True, text=True, timeout=120)
    failed = run(bad)
    assert failed.returncode == 1 and failed.stderr == ""
    assert list(json.loads(failed.stdout)) == ["error"]
    skipped = run(other)
    assert skipped.returncode == 0 and json.loads(skipped.stdout)["steps"] == {}
    assert "no installed reader" in json.loads(skipped.stdout)["skipped"]
