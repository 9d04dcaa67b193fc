"""What every run of verl's real trainer in the suite is checked for (tests/integrations/test_verl_trainer.py,
tests/integrations/test_verl_capture.py): each check reads one run's report and files, so a run made once
serves every check that fits its configuration (docs/contributing.md, "Expensive runs are shared")."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof.manifest import read_records

WAIT_FOR_EVERY_FIGURE = {"RLPROF_TRACKER_WAIT_S": "600"}
"""verl's logger waits for every worker's timings of the step (``RLPROF_TRACKER_WAIT_S``, a product setting added
for this, issue 46): with the default 1 s bound a loaded machine logged a step without ``actor_update`` (CI)."""


def check_participants(run: dict, save: Path, steps: list[int], regions=("actor_update",)) -> None:
    """Every step in ``steps`` has each of ``regions`` on every training rank and ``rollout_generate``
    on every replica, in the replica's own process (which carries its replica rank)."""
    processes = run["processes"]
    replicas = {p["pid"]: p["replica_rank"] for p in processes if p["replica_rank"] is not None}
    trainers = {p["pid"]: p["rank"] for p in processes if p["replica_rank"] is None}
    assert replicas and sorted(replicas.values()) == list(range(len(replicas)))  # the one hf replica: 0
    assert all(p["roles"] == ["rollout"] for p in processes if p["pid"] in replicas)
    by_step = {s["step"]: {r["region"]: r for r in s["regions"]} for s in run["steps"]}
    assert sorted(by_step) == steps
    recorded = [r for r in read_records([save]) if r["type"] == "region"]
    for step in steps:
        for name in regions:
            assert len(by_step[step][name]["per_rank"]) == len(set(trainers.values())), (step, name)
            assert {r["pid"] for r in recorded if r["step"] == step and r["region"] == name} == set(trainers)
        assert "rollout_generate" in by_step[step], step
        generated = {r["pid"] for r in recorded if r["step"] == step and r["region"] == "rollout_generate"}
        assert generated == set(replicas), step
    for s in run["steps"]:  # the rollout is in the step: what no region (nor a capture being written) covers is little
        assert s["untracked_ms"] < s["span_ms"] / 2, (s["step"], s["untracked_ms"], s["writing_ms"], s["span_ms"])


def check_step_metrics(logged: Path, save: Path, run: dict, steps: int, profiled: list[int]) -> None:
    """Issue 42. Every step's line in verl's file logger (``trainer.logger=[console,file]``) holds the
    ``rlprof/`` metrics of the actor's regions (every training rank timed on every step, profiled or not) and
    of the rollout, under names every tracker accepts; the run's ``step_metrics.jsonl`` has every step, in
    order, with the same figures, the profiled steps marked. ``steps``: how many the run trained; ``profiled``:
    the steps it captured."""
    from rlprof.step_metrics import check_names, metrics_files, read_step_metrics

    ranks = sorted({p["rank"] for p in run["processes"] if p["replica_rank"] is None})
    lines = [json.loads(line) for line in logged.read_text().splitlines()]
    by_step = {line["step"]: line["data"] for line in lines if line["step"] >= 1}  # step 0: validation, before training
    assert sorted(by_step) == list(range(1, steps + 1)), sorted(by_step)
    for step, data in by_step.items():
        ours = {k: v for k, v in data.items() if k.startswith("rlprof/")}
        assert check_names(ours) == [], check_names(ours)
        for region in ("update", "compute_log_prob"):
            assert ours.get(f"rlprof/actor/{region}/slowest_s", 0) > 0, (step, sorted(ours))
            assert ours[f"rlprof/actor/{region}/slowest_rank"] in ranks, (step, ours)
            assert ours[f"rlprof/actor/{region}/spread_s"] >= 0, (step, ours)
        assert ours.get("rlprof/rollout/generate/slowest_s", 0) > 0, (step, sorted(ours))
        assert ours["rlprof/step/time_s"] >= ours["rlprof/actor/update/slowest_s"], (step, ours)
        assert data["timing_s/gen"] == pytest.approx(ours["rlprof/rollout/generate/slowest_s"], abs=0.05), step
    (run_dir,) = [p for p in save.iterdir() if (p / "manifest").is_dir()]
    (path,) = metrics_files(run_dir)
    records = [r for r in read_step_metrics(path) if r.kind == "step"]
    assert [r.step for r in records] == list(range(1, steps + 1))
    assert [r.step for r in records if r.profiled] == profiled
    for record in records:  # every actor rank timed on every step, profiled or not
        assert sorted(set(record.timings["actor/actor_update"]["rank"])) == ranks, record.timings.keys()
        # the logger's figures are what had arrived when verl logged the step: all of it (WAIT_FOR_EVERY_FIGURE)
        assert by_step[record.step]["rlprof/actor/update/slowest_s"] <= record.metrics["rlprof/actor/update/slowest_s"]
    # each profiled step's split, analysed by the workers during the run: its four parts add up to each region's window
    splits = {r.step: r.metrics for r in read_step_metrics(path) if r.kind == "split"}
    assert sorted(splits) == profiled, sorted(splits)
    for step, metrics in splits.items():
        for region in ("update", "compute_log_prob"):
            parts = [metrics[f"rlprof/actor/{region}/{p}"] for p in ("compute_frac", "exposed_comm_frac",
                                                                   "exposed_memory_frac", "idle_frac")]
            assert sum(parts) == pytest.approx(1.0, abs=1e-3) and parts[0] > 0, (step, region, metrics)
    split_lines = [data for data in by_step.values() if "rlprof/split/step" in data]  # with a later logged step
    assert all(data["rlprof/split/step"] in profiled for data in split_lines), split_lines


def check_cost_and_stop_path(run: dict, save: Path, log: str, profiled: list[int]) -> None:
    """Issue 41. Every torch trace, the replica's included, was stopped, saved and freed without the GIL
    (``stop_path: "nogil"`` in its record). The report's cost of each profiled step is what it took beyond
    the unprofiled median by verl's own ``timing_s/step`` (read here from verl's console log), within 10%."""
    traces = [r for r in read_records([save]) if r["type"] == "artifact" and r["path"].endswith(".pt.trace.json.gz")]
    assert traces and {r.get("stop_path") for r in traces} == {"nogil"}, [(r["path"], r.get("stop_path")) for r in traces]
    verl = {int(m.group(1)): float(m.group(2)) * 1e3
            for m in re.finditer(r"step:(\d+) - .*?timing_s/step:([0-9.]+)", log)}
    unprofiled = statistics.median(ms for step, ms in verl.items() if step not in profiled)
    cost = {s["step"]: s for s in run["profiling_cost"]["steps"]}
    for step in profiled:
        expected = max(verl[step] - unprofiled, 0.0)
        assert cost[step]["timed_by"] == "verl timing_s", cost[step]
        assert abs(cost[step]["profiling_ms"] - expected) <= max(0.1 * expected, 5.0), (step, cost[step], verl)


def check_inside_regions(run: dict, profiled: list[int]) -> None:
    """What the traces say inside each region (issue 32, verl torch discrete): the actor's regions hold
    FSDP's gloo collectives, the replica's ``rollout_generate`` is split from its own trace, and every
    row of ``rlprof breakdown --json`` on the run's traces adds up: compute + exposed communication +
    exposed memory + idle = window, within 1%."""
    splits = {(s["step"], s["region"], s["name"]): s for s in run["inside"]["splits"]}
    replica = next(p["name"] for p in run["processes"] if p["replica_rank"] is not None)
    trainers = {p["name"] for p in run["processes"] if p["replica_rank"] is None}
    for step in profiled:
        for name in trainers:
            for region in ("actor_update", "actor_compute_log_prob"):
                assert splits[(step, region, name)]["communication_ms"] > 0, (step, region, name, splits.keys())
        generate = splits[(step, "rollout_generate", replica)]
        assert generate["compute_ms"] > 0 and generate["wall_ms"] > 0, generate
    traces = [f["path"] for f in run["files"] if f["path"].endswith(".pt.trace.json.gz")]
    out = subprocess.run([sys.executable, "-m", "rlprof.cli", "breakdown", *traces, "--json"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["rows"]
    assert rows and {r["region"] for r in rows} >= {"actor_update", "actor_compute_log_prob", "rollout_generate"}
    for r in rows:
        parts = r["compute_ms"] + r["exposed_communication_ms"] + r["exposed_memory_ms"] + r["idle_ms"]
        assert parts == pytest.approx(r["window_ms"], rel=0.01, abs=1e-3), r
