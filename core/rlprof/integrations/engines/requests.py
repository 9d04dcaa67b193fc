"""A rollout replica's request records from its engine: the optional part of the engine contract, driven.

:class:`ReplicaRequests` is what an :class:`~rlprof.integrations.engines.replica.EngineReplica` holds for it.
Where the replica's rollout is timed (step metrics on, the rollout enabled: every step, profiled or not) and its
engine adapter supplies records (:class:`~rlprof.integrations.engines.contract.RequestSource`), it:

* adds the adapter's ``request_kwargs()`` to the engine's constructor arguments (vLLM keeps per-request stats
  only with log stats on; rlprof turns them on where it builds the engine: bench/bench_vllm_log_stats.py
  measures what that costs);
* once the engine is built (the replica is first handed it), the adapter's ``request_engine`` (vLLM: its stat loggers,
  which log stats start too, dropped);
* measures the engine's clock offset once (:class:`~rlprof.request_records.EngineClock`);
* after each generate call (:meth:`served`), has the adapter turn the engine's outputs into records, checks the
  clock mapping on them (measured again and said once when it is off), sets their replica and step, and hands
  them to the replica's Profiler (:meth:`rlprof.Profiler.record_requests`), which sends them on with its step
  timings to the run's driver.

Never raises into the rollout: an adapter that raises is said once and its records are left out.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from rlprof.integrations.engines.contract import RequestContext, load_engine, request_source
from rlprof.notices import say_once
from rlprof.request_records import EngineClock

log = logging.getLogger("rlprof")


class ReplicaRequests:
    """One replica's request records (see the module doc). ``source``: None when there are none to keep."""

    def __init__(self, profiler: Any, engine: str, replica_rank: int):
        self.profiler = profiler
        self.engine = engine
        self.replica_rank = replica_rank
        self.source: Any = None
        self.clock: EngineClock | None = None
        self.recorded = 0
        """Records handed on so far."""
        self._engine_id: int | None = None
        if "rollout" not in profiler.plan.timed:
            return
        try:
            self.source = request_source(load_engine(engine))
        except Exception as exc:  # the adapter cannot load: the replica's profiling says why elsewhere
            log.warning("rlprof: rollout engine %s: no request records (%s: %s)", engine, type(exc).__name__, exc)
            return
        if self.source is not None:
            self.clock = EngineClock()

    def kwargs(self) -> Mapping[str, Any]:
        """What the engine's constructor needs for its per-request stats (empty without a source)."""
        if self.source is None:
            return {}
        try:
            return dict(self.source.request_kwargs())
        except Exception as exc:
            self._say("request_kwargs", exc)
            return {}

    def engine_ready(self, engine: Any) -> None:
        """The replica was handed ``engine``: the adapter's ``request_engine``, once per engine."""
        source = self.source
        if source is None or id(engine) == self._engine_id or not callable(getattr(source, "request_engine", None)):
            return
        self._engine_id = id(engine)
        try:
            source.request_engine(engine)
        except Exception as exc:
            self._say("request_engine", exc)

    def served(self, outputs: Any, step: int | None = None) -> int:
        """The engine's ``outputs`` of a generate call, as records of ``step`` (default: the replica's step in
        progress), handed on. Returns how many. Call before the call's region ends."""
        source, clock = self.source, self.clock
        if source is None or clock is None:
            return 0
        step = self.profiler.current_step if step is None else step
        context = RequestContext(self.replica_rank, step, clock)
        try:
            records = list(source.requests(outputs, context))
            said = clock.check(records)
            if said is not None:  # measured again: map these once more
                self._warn(said)
                records = list(source.requests(outputs, context))
        except Exception as exc:
            self._say("requests", exc)
            return 0
        for record in records:
            record.replica = self.replica_rank
            if record.step is None:
                record.step = step
        self.profiler.record_requests(records)
        self.recorded += len(records)
        return len(records)

    def _say(self, call: str, exc: BaseException) -> None:
        self._warn(f"{call} raised {type(exc).__name__}: {exc}; its request records are left out, the rollout goes on")

    def _warn(self, message: str) -> None:
        text = f"rollout engine {self.engine}, replica {self.replica_rank}: {message}"
        if say_once(f"request records: {id(self)}: {message}", log, "rlprof: %s", text):
            self.profiler.record_warning(self.engine, text)
