"""verl's per-sample agent-loop metrics (``AgentLoopMetrics``) joined to the rollout's request records.

Why: verl's agent loop times each sample itself (``AgentLoopMetrics``: ``generate_sequences``, ``tool_calls``,
``compute_score``, ``num_preempted``). The legacy trainer logs their min, mean and max; verl 0.9.1's V1 trainer
stores them per sample in its TransferQueue and drops them. A request's record (docs/engines.md, "Request
records") is the engine's view (its replica, arrival, queue, first and last token); what the sample spent on
its tools and its reward, and how long its generate calls took as the caller saw them (routing, the Ray call,
the server's queue) only the agent loop knows. So, in every agent-loop worker process of a run whose rollout
is timed (:func:`watch`, wherever verl's agent loop is imported):

* each sample's agent loop (``AgentLoopWorker._run_agent_loop``, an asyncio task of its own) notes the engine
  request ids its turns were given (``LLMServerClient._vllm_request_id``: a fresh id per turn, the one the
  server's record carries);
* when the sample's post-processing has run (``_agent_loop_postprocess``: verl's reward is computed there), its
  metrics become one record of the sample's last request: ``generate_s`` (``generate_sequences``, every turn
  together), ``tool_s`` (``tool_calls``), ``reward_s`` (``compute_score``), ``preemptions`` (``num_preempted``,
  where known), of the step of the weights it was generated with (the output's ``max_global_steps`` + 1, as the
  replica's record: :meth:`RolloutDistProfiler.step_of <rlprof.integrations.verl.rollout_profiler.
  RolloutDistProfiler.step_of>`), and ``replica`` -1 (the agent loop does not know which replica served it);
* the records go to the run's driver as a replica's do (:class:`~rlprof.runtime.step_timings.RegionTimes` to the
  run's mailbox; no Profiler here: the worker captures nothing), where the step's records of one request are
  one (:func:`rlprof.request_records.joined`): verl's own numbers, never re-timed.

The values are verl's, unchanged: a record's ``generate_s`` is the sample's ``generate_sequences``. On the agent
loop's path each sample costs a context variable, a list append per turn and one record; nothing runs on the
trainer's thread.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import os
from typing import Any

from rlprof.integrations.verl import on_import

log = logging.getLogger("rlprof")

AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"
WORKER = "AgentLoopWorker"
TQ_MODULE = "verl.trainer.ppo.v1.agent_loop_tq"
TQ_WORKER = "AgentLoopWorkerTQ"
"""verl 0.9.1's V1 agent-loop worker (TransferQueue), which overrides ``_agent_loop_postprocess``."""
CLIENT_MODULE = "verl.workers.rollout.llm_server"
CLIENT = "LLMServerClient"

_sample: contextvars.ContextVar = contextvars.ContextVar("rlprof_agent_loop_sample", default=None)
"""The engine request ids of the sample whose agent loop runs in this task (a list), else None."""


def watch() -> None:
    """Patch verl's agent-loop worker and its server client once their modules are imported (never imported here)."""
    on_import.when_imported(AGENT_LOOP, _patch_worker)
    on_import.when_imported(TQ_MODULE, _patch_tq_worker)
    on_import.when_imported(CLIENT_MODULE, _patch_client)


def forget() -> None:
    """Leave them as verl wrote them (``rlprof.verl.uninstall``)."""
    import sys

    for name, cls in ((AGENT_LOOP, WORKER), (TQ_MODULE, TQ_WORKER), (CLIENT_MODULE, CLIENT)):
        on_import.forget(name)
        target = _actor_class(getattr(sys.modules.get(name), cls, None))
        for attr, value in list(vars(target).items()) if target is not None else ():
            if getattr(value, "rlprof_wrapped", False):
                setattr(target, attr, value.__wrapped__)


def _actor_class(cls: Any) -> Any:
    from rlprof.integrations.verl.fully_async import _actor_class as actor_class

    return actor_class(cls)


def _wrap(cls: Any, name: str, make) -> None:
    original = vars(cls).get(name) if cls is not None else None
    if original is None or getattr(original, "rlprof_wrapped", False):
        return
    wrapped = functools.wraps(original)(make(original))
    wrapped.rlprof_wrapped = True
    setattr(cls, name, wrapped)


# The wrappers below reach this module's state only through its functions: Ray ships an actor class's methods to
# its process by value (cloudpickle), with the globals they name, and a function of this module goes by reference
# (a ContextVar cannot be pickled: verl's V1 agent-loop worker failed to start when a wrapper named it).


def _patch_worker(module: Any) -> None:
    cls = _actor_class(getattr(module, WORKER, None))

    def run(original):
        async def _run_agent_loop(self, *args, **kwargs):
            token = sample_began()
            try:
                return await original(self, *args, **kwargs)
            finally:
                sample_ended(token)
        return _run_agent_loop

    _wrap(cls, "_run_agent_loop", run)
    _wrap(cls, "_agent_loop_postprocess", _postprocessed)


def _patch_tq_worker(module: Any) -> None:
    _wrap(_actor_class(getattr(module, TQ_WORKER, None)), "_agent_loop_postprocess", _postprocessed)


def _patch_client(module: Any) -> None:
    def request_id(original):
        def _vllm_request_id(self, *args, **kwargs):
            return request_noted(original(self, *args, **kwargs))
        return _vllm_request_id

    _wrap(getattr(module, CLIENT, None), "_vllm_request_id", request_id)


def _postprocessed(original):
    async def _agent_loop_postprocess(self, output, *args, **kwargs):
        result = await original(self, output, *args, **kwargs)
        sample_done(self, output)
        return result
    return _agent_loop_postprocess


def sample_began() -> Any:
    """A sample's agent loop begins in this task: its own list of engine request ids (the token to reset)."""
    return _sample.set([])


def sample_ended(token: Any) -> None:
    _sample.reset(token)


def request_noted(engine_id: Any) -> Any:
    """The engine request id the client gave this sample's next turn, noted; returned unchanged."""
    ids = _sample.get()
    if ids is not None:
        ids.append(engine_id)
    return engine_id


def sample_done(worker: Any, output: Any) -> None:
    """The sample's post-processing ran (its reward is computed): its record, on its way to the run's driver."""
    ids = _sample.get()
    if not ids:
        return
    try:
        sender = Sender.of(worker)
        if sender is not None:
            sender.send(sample_record(ids[-1], output))
    except Exception as exc:  # the sample's record is lost, never the sample
        log.debug("rlprof: an agent loop's metrics were not recorded: %s: %s", type(exc).__name__, exc)


def sample_record(request_id: str, output: Any) -> Any:
    """The record of a sample's ``output`` (an ``AgentLoopOutput``, or the list of them a V1 agent loop may
    return): its metrics summed over its outputs (the reward's is the last output's, which verl scores), on its
    last request ``request_id``."""
    from rlprof.request_records import RequestRecord

    outputs = output if isinstance(output, list) else [output]
    metrics = [_metrics(o) for o in outputs]
    generate = sum(float(m.get("generate_sequences") or 0.0) for m in metrics)
    tools = sum(float(m.get("tool_calls") or 0.0) for m in metrics)
    preempted = [int(m["num_preempted"]) for m in metrics if m.get("num_preempted") is not None]
    reward = metrics[-1].get("compute_score") if metrics else None
    version = (getattr(outputs[-1], "extra_fields", None) or {}).get("max_global_steps") if outputs else None
    return RequestRecord(str(request_id), -1, int(version) + 1 if version is not None else None,
                         preemptions=sum(preempted) if preempted and min(preempted) >= 0 else None,
                         tool_s=tools, reward_s=float(reward) if reward is not None else None, generate_s=generate)


def _metrics(output: Any) -> dict:
    metrics = getattr(output, "metrics", None)
    if metrics is None:
        return {}
    return metrics if isinstance(metrics, dict) else metrics.model_dump()


class Sender:
    """One agent-loop worker process's records, on their way to the run's driver (see the module doc); None where
    the run's rollout is not timed or no run id is shared."""

    _made: "dict[int, Sender | None]" = {}
    """Per process (a forked child makes its own)."""

    def __init__(self, times: Any):
        self.times = times

    @classmethod
    def of(cls, worker: Any) -> "Sender | None":
        pid = os.getpid()
        if pid not in cls._made:
            cls._made[pid] = cls._make(getattr(worker, "config", None))
        return cls._made[pid]

    @classmethod
    def _make(cls, config: Any) -> "Sender | None":
        from rlprof.integrations.verl.run_id import shared_run_id
        from rlprof.integrations.verl.sections import field
        from rlprof.integrations.verl.step_metrics import timed

        shared = shared_run_id()
        rollout = field(field(field(config, "actor_rollout_ref"), "rollout"), "profiler")
        if not shared or not timed(config) or not field(rollout, "enable", False):
            return None
        from rlprof.integrations.step_mailbox import RaySink
        from rlprof.layout import hostname
        from rlprof.runtime.run_id import run_id_for
        from rlprof.runtime.step_timings import RegionTimes, register

        run_id = run_id_for(shared)
        times = RegionTimes(run_id, f"agentloop-{hostname()}-{os.getpid()}", -1, RaySink(run_id, _Nowhere()))
        times.outlives = True
        times.requests_only = True  # a trainer's logger does not wait for it (StepBook.for_tracker)
        return cls(register(times))

    def send(self, record: Any) -> None:
        self.times.requests.append(record)


class _Nowhere:
    """Where a worker's records go when its run has no driver to take them (none made the run's mailbox)."""

    def send(self, batch: Any) -> None:
        pass
