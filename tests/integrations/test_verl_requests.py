"""Issue 48 on verl's side, without a run: how a verl replica's request records and verl's per-sample agent-loop
metrics reach the run's driver, and how the V1 trainer's step window holds what its step does at its edges.

* a replica server's profiler (verl's ``build_rollout_dist_profiler`` under the drop-in, torch, every step timed)
  hands on the records its server makes, each of the step its weights serve, and nothing else of its timings;
* a sample's ``AgentLoopMetrics`` (verl's real pydantic classes) become one record of its last request, which the
  driver joins to the replica's record of that request: verl's numbers, unchanged;
* the step window of verl's trainers is the union of ``_start_profiling``..``_stop_profiling`` and verl's ``step``
  phase, in either order (V1: the phase around the calls; the legacy trainer: the calls around the phase).
verl's real trainer does all of it end to end in tests/integrations/test_verl_trainer.py.
"""

from __future__ import annotations

import types

import pytest

pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig  # noqa: E402

from rlprof.request_records import RequestRecord, joined, read_file  # noqa: E402
from rlprof.runtime.step_book import StepBook  # noqa: E402
from rlprof.verl import build_rollout_dist_profiler  # noqa: E402

S = 10**9


@pytest.fixture(autouse=True)
def one_run(monkeypatch, tmp_path):
    monkeypatch.setenv("RLPROF_RUN_ID", f"verl-requests-{tmp_path.name}")
    monkeypatch.delenv("WORLD_SIZE", raising=False)


class Kept:
    def __init__(self):
        self.batches = []

    def send(self, batch):
        self.batches.append(batch)


def test_a_replica_hands_on_its_servers_records_of_the_step_its_weights_serve_and_no_region_timings(tmp_path):
    config = ProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path), ranks=[1],
                            tool_config=TorchProfilerToolConfig(contents=["cpu"]))
    replica = build_rollout_dist_profiler(1, 1, config=config, tool_config=config.tool_config)
    times = replica.profiler.timings
    kept = times.sink = Kept()  # where the run's mailbox (or, without Ray, the process's own book) was
    with replica.profiler.unsampled_role("rollout", "generate"):  # a region of the replica: never sent
        replica.record_requests([RequestRecord("a", -1, arrival_ns=1, last_token_ns=2)], version=4)
    replica.record_requests([RequestRecord("b", -1, step=9)])  # a record that names its step keeps it
    times.flush()
    (batch,) = kept.batches
    assert batch.timings == [] and batch.splits == [] and batch.requests_only
    assert [(r.id, r.replica, r.step) for r in batch.requests] == [("a", 1, 5), ("b", 1, 9)]
    assert replica.step_of(0) == 1  # the weights of version 0 (synced before training) serve step 1
    replica.finalize()


def agent_loop_output(generate=1.25, tools=0.5, reward=0.125, preempted=-1, version=3):
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

    metrics = AgentLoopMetrics(generate_sequences=generate, tool_calls=tools, compute_score=reward,
                               num_preempted=preempted)
    return AgentLoopOutput(prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 1, 1], metrics=metrics,
                           extra_fields={"global_steps": version, "min_global_steps": version,
                                         "max_global_steps": version})


def test_a_samples_agent_loop_metrics_are_one_record_of_its_last_request_with_verls_values():
    from rlprof.integrations.verl.agent_loop import sample_record

    record = sample_record("engine-2", agent_loop_output())
    assert (record.id, record.replica, record.step) == ("engine-2", -1, 4)  # version 3's weights: step 4
    assert (record.generate_s, record.tool_s, record.reward_s, record.preemptions) == (1.25, 0.5, 0.125, None)
    assert record.start_ns is None and record.end_ns is None  # the engine's record has the times
    turns = sample_record("engine-3", [agent_loop_output(1.0, 0.25, 0.0, 1), agent_loop_output(0.5, 0.25, 0.75, 2)])
    assert (turns.generate_s, turns.tool_s, turns.reward_s, turns.preemptions) == (1.5, 0.5, 0.75, 3)


def test_the_driver_joins_a_samples_metrics_to_its_replicas_record_and_writes_one_record(tmp_path):
    from rlprof.integrations.verl.agent_loop import sample_record

    base = 1_000 * S
    engine = RequestRecord("r1", 0, 4, base + S // 10, base + S // 10, base + S // 5, base + S // 4, base + S, 7, 32,
                           "length", 0)
    other = RequestRecord("r2", 0, 4, base, base, base, base + S // 10, base + S // 2, 7, 8, "stop", 0)
    sample = sample_record("r1", agent_loop_output())
    assert [r.id for r in joined([sample, other, engine])] == ["r2", "r1"]  # one record a request
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", (), root=tmp_path)
    book.began(4, base - S)
    book.requests([sample, engine, other])  # the sample's part may come first
    book.ended(4, base + 2 * S)
    book.pump(closing=True)
    book.close()
    (step,) = list(read_file(tmp_path / "rollout_requests.jsonl.gz"))
    by_id = {r.id: r for r in step.records}
    assert sorted(by_id) == ["r1", "r2"]
    r1 = by_id["r1"]
    assert (r1.replica, r1.generated_tokens, r1.finish_reason) == (0, 32, "length")
    assert (r1.generate_s, r1.tool_s, r1.reward_s) == (1.25, 0.5, 0.125)  # verl's values, unchanged
    assert (r1.arrival_ns, r1.last_token_ns) == (base + S // 10, base + S)
    from rlprof.step_metrics import read_step_metrics

    (line,) = [r for r in read_step_metrics(tmp_path / "step_metrics.jsonl") if r.kind == "step"]
    assert line.metrics["rlprof/requests/count"] == 2
    assert line.metrics["rlprof/requests/slowest/tokens"] == 32 and line.metrics["rlprof/requests/slowest/replica"] == 0


def step_window(order):
    """The book's window of step 1 when the trainer's calls and its ``step`` phase come in ``order``."""
    from rlprof.integrations.verl.trainer_steps import StepTimer

    timer = StepTimer({"global_profiler": {"tool": None}})
    book = StepBook(None, "run", ())
    timer.metrics = types.SimpleNamespace(book=book)
    clock = iter(range(1, 10))
    timer.clock_ns = lambda: next(clock) * S
    at = {}
    for call in order:
        now = timer.clock_ns()
        at[call] = now
        if call == "phase_began":
            timer.phase_began(1, now)
        elif call == "phase_ended":
            timer.phase_ended(1, now)
        elif call == "begin":
            timer.clock_ns = lambda now=now: now
            timer.begin(1)
            timer.clock_ns = lambda: next(clock) * S
        else:
            timer.clock_ns = lambda now=now: now
            timer.end(1)
            timer.clock_ns = lambda: next(clock) * S
    book.pump(closing=True)
    (figures,) = book.recent()
    return (figures.start_ns, figures.end_ns), at


@pytest.mark.parametrize("order,first,last", [
    (("phase_began", "begin", "end", "phase_ended"), "phase_began", "phase_ended"),  # V1: the phase around the calls
    (("begin", "phase_began", "phase_ended", "end"), "begin", "end"),  # the legacy trainer: the calls around it
])
def test_the_step_window_is_verls_step_phase_and_the_profiling_calls_together(order, first, last):
    window, at = step_window(order)
    assert window == (at[first], at[last])


def test_the_patched_agent_loop_classes_can_be_shipped_to_their_ray_actors():
    """Ray ships an actor class's methods to the actor's process by value (cloudpickle), with the globals they name:
    verl's V1 trainer failed to start its agent-loop worker (``cannot pickle '_contextvars.ContextVar'``) while a
    wrapper of the drop-in named its context variable."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import ray.cloudpickle as pickle
        import verl
        from verl.experimental.agent_loop import agent_loop
        from verl.trainer.ppo.v1 import agent_loop_tq
        from verl.workers.rollout import llm_server
        tq = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class  # what Ray ships for V1
        methods = [tq._agent_loop_postprocess, tq._run_agent_loop, agent_loop.AgentLoopWorker._agent_loop_postprocess,
                   llm_server.LLMServerClient._vllm_request_id]
        assert all(getattr(m, "rlprof_wrapped", False) for m in methods), methods
        for shipped in (*methods, agent_loop.AgentLoopWorker):
            pickle.dumps(shipped)
        print("shipped")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RLPROF_VERL": "1"})
    assert proc.returncode == 0 and proc.stdout.split()[-1:] == ["shipped"], proc.stderr[-3000:]
