"""Captures within a budget: each capture's size is recorded; a capture over ``capture_budget_mb`` skips its
role's next captures, a node's run over ``run_budget_gb`` stops capturing on every rank of that node, each with
a ``skip`` record naming the budget and the size measured; training goes on to the end either way."""

import pytest
from pathlib import Path

import rlprof
from rlprof.manifest import read_records
from rlprof.runtime.budget import MB


class Writes:
    """Writes ``sizes[role]`` bytes (``sizes["step"]`` for a step capture) when a capture closes."""

    def __init__(self, sizes):
        self.sizes = sizes

    def _write(self, ctx, what):
        path = ctx.output_dir() / f"{what}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * self.sizes[what])
        return str(path)

    @rlprof.hookimpl
    def stop_role(self, ctx):
        if ctx.closes_capture:
            return self._write(ctx, ctx.role)

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            return self._write(ctx, "step")


def train(save_path, sizes, *, discrete=False, steps=4, rank=0, run_id="budget-run", roles=("actor",), extra=()):
    """A training loop of ``steps`` steps, steps 1-3 profiled; returns how many steps it trained."""
    prof = rlprof.Profiler(None, rank=rank, world_size=2, roles=roles, run_id=run_id,
                           backends={"writes": Writes(sizes)}, overrides=[
        "global_profiler.tool=writes", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2,3]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        f"actor_rollout_ref.actor.profiler.discrete={str(discrete).lower()}", *extra])
    trained = 0
    for step in range(1, steps + 1):
        prof.start_step(step)
        for role in roles:
            with prof.role(role, "update"):
                pass
        prof.step_boundary()
        trained += 1
    prof.finalize()
    return trained


def records(save_path, kind, **match):
    return [r for r in read_records([save_path]) if r["type"] == kind and all(r.get(k) == v for k, v in match.items())]


def test_every_capture_records_its_size(save_path):
    train(save_path, {"step": 3000})
    sizes = {r["capture"]: r["bytes"] for r in records(save_path, "capture")}
    assert sizes == {"step1": 3000, "step2": 3000, "step3": 3000}
    (first,) = records(save_path, "capture", capture="step1")
    assert (first["steps"], first["roles"], first["rank"]) == ([1], ["actor"], 0)


def test_a_capture_over_its_budget_skips_the_rest_and_training_goes_on(save_path):
    assert train(save_path, {"step": 2 * MB}, extra=["global_profiler.capture_budget_mb=1"]) == 4
    assert [r["capture"] for r in records(save_path, "capture")] == ["step1"]
    skips = records(save_path, "skip")
    assert [s["step"] for s in skips] == [2, 3]
    for s in skips:
        assert (s["by"], s["budget"], s["limit_bytes"], s["measured_bytes"], s["roles"]) == (
            "budget", "capture_budget_mb", MB, 2 * MB, ["actor"])
        assert "capture_budget_mb" in s["reason"] and "step1" in s["reason"]


def test_discrete_a_role_over_its_budget_is_skipped_alone(save_path):
    train(save_path, {"actor": 2 * MB, "ref": 10}, discrete=True, roles=("actor", "ref"),
          extra=["global_profiler.capture_budget_mb=1", "actor_rollout_ref.ref.profiler.enable=true",
                 "actor_rollout_ref.ref.profiler.all_ranks=true", "actor_rollout_ref.ref.profiler.discrete=true"])
    captured = [(r["step"], r["roles"]) for r in records(save_path, "capture")]
    assert captured == [(1, ["actor"]), (1, ["ref"]), (2, ["ref"]), (3, ["ref"])]
    assert [(s["step"], s["roles"]) for s in records(save_path, "skip")] == [(2, ["actor"]), (3, ["actor"])]


def test_a_node_over_its_run_budget_stops_capturing_on_every_rank(save_path):
    """Two ranks of one node (one save path): 0.6 MB each at step 1 passes 1 MB; steps 2 and 3 are
    skipped on both, though neither rank alone reached the budget."""
    extra = [f"global_profiler.run_budget_gb={MB / 1024 ** 3}"]
    profs = [rlprof.Profiler(None, rank=rank, world_size=2, run_id="node-run", backends={"writes": Writes({"step": 600_000})},
                             overrides=["global_profiler.tool=writes", f"global_profiler.save_path={save_path}",
                                        "global_profiler.steps=[1,2,3]", "actor_rollout_ref.actor.profiler.enable=true",
                                        "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])
             for rank in (0, 1)]
    for step in range(1, 5):
        for prof in profs:
            prof.start_step(step)
        for prof in profs:
            with prof.role("actor", "update"):
                pass
            prof.step_boundary()
    for prof in profs:
        prof.finalize()
    assert sorted((r["rank"], r["step"]) for r in records(save_path, "capture")) == [(0, 1), (1, 1)]
    skips = records(save_path, "skip")
    assert sorted((s["rank"], s["step"]) for s in skips) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert {(s["budget"], s["measured_bytes"]) for s in skips} == {("run_budget_gb", 1_200_000)}


def test_each_node_keeps_its_own_run_budget(tmp_path):
    """Two nodes (each its own save path, as simulated nodes have): 0.6 MB per step each, 1 MB per node."""
    extra = [f"global_profiler.run_budget_gb={MB / 1024 ** 3}"]
    for node in ("a", "b"):
        train(tmp_path / node, {"step": 600_000}, rank=0 if node == "a" else 1, extra=extra)
    for node in ("a", "b"):
        assert [r["step"] for r in records(tmp_path / node, "capture")] == [1, 2]
        assert [s["step"] for s in records(tmp_path / node, "skip")] == [3]


def test_three_simulated_nodes_each_keep_their_own_run_budget(tmp_path):
    """As ``rlprof demo --nodes 3`` lays a run out (one root per node, one host name for all): node 0 holds
    ranks 0 and 1, nodes 1 and 2 one rank each, all stepping together. 0.6 MB per capture, 1 MB per node:
    node 0 is over after step 1 (two ranks), nodes 1 and 2 after step 2; one count for all would have
    stopped every node after step 1."""
    extra = [f"global_profiler.run_budget_gb={MB / 1024 ** 3}"]
    roots = {0: tmp_path / "node0", 1: tmp_path / "node0", 2: tmp_path / "node1", 3: tmp_path / "node2"}
    profs = {rank: rlprof.Profiler(None, rank=rank, world_size=4, run_id="nodes-run", backends={"writes": Writes({"step": 600_000})},
                                   overrides=["global_profiler.tool=writes", f"global_profiler.save_path={root}",
                                              "global_profiler.steps=[1,2,3]", "actor_rollout_ref.actor.profiler.enable=true",
                                              "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])
             for rank, root in roots.items()}
    for step in range(1, 5):
        for prof in profs.values():
            prof.start_step(step)
        for prof in profs.values():
            with prof.role("actor", "update"):
                pass
            prof.step_boundary()
    for prof in profs.values():
        prof.finalize()
    captured = {node: sorted((r["rank"], r["step"]) for r in records(tmp_path / node, "capture")) for node in ("node0", "node1", "node2")}
    assert captured == {"node0": [(0, 1), (1, 1)], "node1": [(2, 1), (2, 2)], "node2": [(3, 1), (3, 2)]}
    skipped = {node: sorted((s["rank"], s["step"], s["budget"]) for s in records(tmp_path / node, "skip")) for node in captured}
    assert skipped == {"node0": [(0, 2, "run_budget_gb"), (0, 3, "run_budget_gb"), (1, 2, "run_budget_gb"), (1, 3, "run_budget_gb")],
                       "node1": [(2, 3, "run_budget_gb")], "node2": [(3, 3, "run_budget_gb")]}


def test_zero_means_no_limit(save_path):
    train(save_path, {"step": 2 * MB}, extra=["global_profiler.capture_budget_mb=0", "global_profiler.run_budget_gb=0"])
    assert len(records(save_path, "capture")) == 3 and not records(save_path, "skip")


def test_the_report_shows_bytes_and_what_the_budget_skipped_as_explained(save_path):
    from rlprof.analysis.report import build_reports, render

    train(save_path, {"step": 2 * MB}, extra=["global_profiler.capture_budget_mb=1"])
    (report,) = build_reports([save_path])
    text = render(report)
    assert report.ok, text  # skipped by the budget: explained, neither missing nor short
    assert "rank 0 capture step1 (actor): 2.0 MiB" in text
    assert "per role: actor 2.0 MiB" in text and "per process: rank 0 2.0 MiB" in text
    assert "budget skipped: rank 0 steps 2, 3 (actor): over global_profiler.capture_budget_mb" in text
    assert "skipped: rank 0: writes steps 2,3 (actor): over global_profiler.capture_budget_mb" in text
    assert [s["steps"] for s in report.as_dict()["budget_skipped"]] == [[2], [3]]


def test_a_link_planted_at_the_budget_folder_redirects_nothing(save_path, tmp_path):
    """The node's count file is written through the layout's link-refusing walk: a ``budget`` folder
    swapped for a link to elsewhere gets nothing (the count goes on in the process), and training ends."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = save_path / "budget-run"
    run_dir.mkdir(parents=True)
    (run_dir / "budget").symlink_to(elsewhere, target_is_directory=True)
    assert train(save_path, {"step": 3000}, extra=["global_profiler.run_budget_gb=1"]) == 4
    assert list(elsewhere.iterdir()) == []
    assert records(save_path, "capture")  # the captures were still recorded


def _budget_with_a_trace_still_being_written(tmp_path, capture_mb, exact=False):
    from rlprof.runtime.budget import CaptureBudget

    budget = CaptureBudget(capture_mb, 0, tmp_path, "host", exact=exact)
    budget.add_artifact({"state": "writing", "path": "step1/rank0/trace.json.gz", "capture": "step1"})
    budget.closed("step1", ("actor",))
    return budget


@pytest.mark.timing
def test_the_default_budget_never_makes_a_profiled_step_wait_for_a_trace_being_written(tmp_path, monkeypatch):
    """The default capture budget guards a disk; waiting on every back-to-back profiled step for a size it
    will not turn on costs training (seen: the replica waited 0.49 s at step 3 of verl's trainer). The wait's
    bound is a minute here, so a wait would show as one, far above anything a busy machine adds."""
    import time

    from rlprof.config.values import DEFAULT_CAPTURE_BUDGET_MB
    from rlprof.runtime import budget as budget_module

    monkeypatch.setattr(budget_module, "SIZE_WAIT_S", 60.0)
    budget = _budget_with_a_trace_still_being_written(tmp_path, DEFAULT_CAPTURE_BUDGET_MB)
    began = time.monotonic()
    assert budget.refused(("actor",)) == {}
    assert not budget.waited and time.monotonic() - began < budget_module.SIZE_WAIT_S


def test_a_budget_the_user_set_waits_for_the_size_it_may_turn_on(tmp_path, monkeypatch):
    from rlprof.runtime import budget as budget_module

    monkeypatch.setattr(budget_module, "SIZE_WAIT_S", 0.05)
    budget = _budget_with_a_trace_still_being_written(tmp_path, 1.0, exact=True)
    budget.refused(("actor",))
    assert budget.waited


def test_a_user_who_sets_the_default_value_is_held_exactly_too(tmp_path, monkeypatch):
    """Whether the user set ``capture_budget_mb`` is the config's to say, not the value's: 2048 written
    out is a budget the user chose (before, a value equal to the default was taken for the default)."""
    from rlprof.config.schema import load_config
    from rlprof.config.values import DEFAULT_CAPTURE_BUDGET_MB
    from rlprof.runtime import budget as budget_module

    base = {"global_profiler": {"tool": "torch", "steps": [1], "save_path": str(tmp_path)}}
    assert not load_config(base).capture_budget_given
    chosen = load_config(base, [f"global_profiler.capture_budget_mb={DEFAULT_CAPTURE_BUDGET_MB:g}"])
    assert chosen.capture_budget_given and chosen.global_.capture_budget_mb == DEFAULT_CAPTURE_BUDGET_MB
    assert not load_config(base, ["global_profiler.capture_budget_mb=null"]).capture_budget_given
    monkeypatch.setattr(budget_module, "SIZE_WAIT_S", 0.05)
    budget = _budget_with_a_trace_still_being_written(tmp_path, DEFAULT_CAPTURE_BUDGET_MB,
                                                      exact=chosen.capture_budget_given)
    budget.refused(("actor",))
    assert budget.waited


def test_a_budget_the_user_set_holds_when_the_last_trace_is_written_seconds_into_the_next_profiled_step(tmp_path):
    """A loaded CI machine wrote a rollout replica's step-1 trace (9.8 MiB, FLOPs counted) more than 2 s after verl's
    step 2 began; the step waited 2 s (the old bound), then captured past ``capture_budget_mb=1`` (test_verl_trainer's
    budget run: steps [1, 2]). The trace here is placed 2.5 s into the step: still the budget decides on it."""
    import threading

    budget = _budget_with_a_trace_still_being_written(tmp_path, 1.0, exact=True)
    trace = tmp_path / "step1" / "rank0" / "trace.json.gz"

    def placed_late():  # whole or not at all, as the process's trace writer places a trace
        trace.parent.mkdir(parents=True, exist_ok=True)
        written = trace.with_name("written")
        written.write_bytes(b"x" * (2 * MB))
        written.rename(trace)

    writer = threading.Timer(2.5, placed_late)
    writer.start()
    try:
        refused = budget.refused(("actor",))
    finally:
        writer.join()
    assert budget.waited and refused["actor"].measured_bytes == 2 * MB, refused


def test_a_trace_over_the_budget_while_still_compressed_ends_the_wait(tmp_path):
    """The bytes compressed so far (``<trace>.partial``) already over ``capture_budget_mb``: the capture is over, the
    step stops waiting for the rest (never placed here) and is skipped."""
    from rlprof.layout import PARTIAL_SUFFIX

    budget = _budget_with_a_trace_still_being_written(tmp_path, 1.0, exact=True)
    partial = tmp_path / "step1" / "rank0" / ("trace.json.gz" + PARTIAL_SUFFIX)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"x" * (MB + 1))
    refused = budget.refused(("actor",))
    assert refused["actor"].budget == "capture_budget_mb" and refused["actor"].measured_bytes == MB + 1, refused
