"""Issue 48: the engine contract's optional request records, without an engine: the vLLM adapter reads vLLM's
own ``RequestOutput``/``RequestStateStats`` (the real classes) onto the run's clock, and a replica hands each
generate call's records to its step (its figures in step_metrics.jsonl, its records in the run's file); an
adapter without the optional methods, or one that raises, leaves the rollout alone."""

from __future__ import annotations

import json
import time

import pytest

from rlprof.integrations.engines.contract import RequestContext, load_engine, request_source
from rlprof.integrations.engines.replica import EngineReplica
from rlprof.request_records import EngineClock, read_run
from rlprof.step_metrics import metrics_files, read_step_metrics

vllm_outputs = pytest.importorskip("vllm.outputs")
from vllm.v1.metrics.stats import RequestStateStats  # noqa: E402

S = 1_000_000_000


def output(request_id, tokens, *, arrival, queued, scheduled, first, last, preemptions=0, stats=True, prompt=4):
    """A finished ``RequestOutput`` as vLLM 0.32 returns it (``metrics`` only with log stats on)."""
    metrics = None
    if stats:
        metrics = RequestStateStats(num_generation_tokens=tokens, num_preemptions=preemptions, arrival_time=arrival,
                                    queued_ts=queued, scheduled_ts=scheduled, first_token_ts=first, last_token_ts=last)
    completion = vllm_outputs.CompletionOutput(index=0, text="", token_ids=list(range(tokens)), cumulative_logprob=None,
                                               logprobs=None, finish_reason="length")
    return vllm_outputs.RequestOutput(request_id, None, list(range(prompt)), None, [completion], True, metrics=metrics)


def config(save, ranks=(1,), steps=(9,)):
    return {"global_profiler": {"tool": "torch", "steps": list(steps), "save_path": str(save)},
            "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {
                "enable": True, "ranks": list(ranks), "tool_config": {"torch": {"contents": ["cpu"], "discrete": True}}}}}}


def test_vllm_supplies_records_with_its_engine_clock_mapped_to_the_runs():
    adapter = load_engine("vllm")
    assert request_source(adapter) is adapter and adapter.request_kwargs() == {"disable_log_stats": False}
    clock = EngineClock(offset_ns=1_000 * S)  # the engine core's monotonic clock, 1000 s behind the wall clock
    out = output("7", 96, arrival=1_700_000_000.5, queued=10.25, scheduled=10.5, first=10.75, last=20.0, preemptions=2)
    (record,) = adapter.requests([out], RequestContext(replica=1, step=3, clock=clock))
    assert (record.id, record.replica, record.step) == ("7", 1, 3)
    assert record.arrival_ns == 1_700_000_000_500_000_000  # wall clock as it is
    assert record.queued_ns == 1_010_250_000_000 and record.last_token_ns == 1_020 * S  # monotonic + offset
    assert (record.prompt_tokens, record.generated_tokens, record.finish_reason, record.preemptions) == (4, 96, "length", 2)
    (bare,) = adapter.requests([output("8", 5, arrival=0, queued=0, scheduled=0, first=0, last=0, stats=False)],
                               RequestContext(replica=0, step=None, clock=clock))
    assert bare.generated_tokens == 5 and bare.arrival_ns is None and bare.last_token_ns is None  # log stats off


def test_a_replica_hands_each_calls_records_to_its_step(save_path):
    replica = EngineReplica(config(save_path), replica_rank=1, num_replicas=2, run_id="r1")
    mono = time.monotonic()
    for step in (1, 2):
        replica.start(object(), step)  # an unprofiled step: no engine call is made
        base = time.monotonic() - mono
        outs = [output(f"{step}-{i}", 8 + 80 * (i == 0), arrival=time.time(), queued=mono + base, scheduled=mono + base,
                       first=mono + base + 0.001, last=mono + base + (0.05 if i == 0 else 0.01)) for i in range(3)]
        time.sleep(0.06)
        assert replica.served(outs) == 3
        replica.stop(object())
    replica.finalize()
    (path,) = metrics_files(replica.profiler.run.run_dir)
    lines = {r.step: r.metrics for r in read_step_metrics(path) if r.kind == "step"}
    assert [lines[s]["rlprof/requests/count"] for s in (1, 2)] == [3, 3]
    assert lines[2]["rlprof/requests/slowest/tokens"] == 88 and lines[2]["rlprof/requests/slowest/replica"] == 1
    kept = read_run(replica.profiler.run.run_dir)
    assert {r.id for r in kept[2].records} == {"2-0", "2-1", "2-2"}
    # mapped onto the run's clock: inside the step's generate region
    line = next(r for r in read_step_metrics(path) if r.kind == "step" and r.step == 2)
    region = line.timings["rollout/rollout_generate"]
    lo, hi = line.start_ns + int(region["start_s"][0] * S), line.start_ns + int(region["end_s"][0] * S)
    assert all(lo - 1_000_000 <= r.scheduled_ns and r.last_token_ns <= hi + 1_000_000 for r in kept[2].records)


class RaisingAdapter:
    def request_kwargs(self):
        return {}

    def requests(self, outputs, context):
        raise RuntimeError("engine changed its outputs")


def test_an_adapter_that_raises_loses_its_records_not_the_rollout(save_path, caplog):
    replica = EngineReplica(config(save_path, ranks=(0,)), replica_rank=0, num_replicas=1, run_id="r2")
    replica.requests.source = RaisingAdapter()
    replica.start(object(), 1)
    assert replica.served([object()]) == 0 and replica.served([object()]) == 0
    replica.stop(object())
    replica.finalize()
    said = [r for r in caplog.records if "engine changed its outputs" in r.getMessage()]
    assert len(said) == 1  # said once


def test_an_adapter_without_the_optional_methods_has_no_records():
    class Plain:
        name, rlprof_contract = "plain", 1
    assert request_source(Plain()) is None
