"""The profiler of one rollout replica's server: :class:`RolloutDistProfiler`, made by verl's
``build_rollout_dist_profiler`` (rlprof's :func:`build_rollout_dist_profiler` under the drop-in).

A replica is a participant of the run like a training rank (its ``process`` record carries its
``replica_rank``), with three differences from a training worker's :class:`DistProfiler`, which is why
it has its own module: verl starts and stops it without a step (the step is the one the trainer began,
or the version the generation driver published: :func:`rlprof.integrations.verl.run_signals.current_step`);
its capture closes after ``stop_profile`` has answered, so the trainer never waits for the replica's
trace; and it never hears the run's last step (the run's watcher finalizes it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import time
from typing import Any, Mapping

from rlprof.integrations.loops import FINALIZE_WAIT_S, wait_on_its_loop
from rlprof.integrations.verl import run_signals
from rlprof.integrations.verl.dist_profiler import DistProfiler, covering_world, process_profilers
from rlprof.integrations.verl.sections import field, tools_of
from rlprof.notices import say_once

log = logging.getLogger("rlprof")

ANSWER_GRACE_S = 0.01
"""How long a replica's server waits, after answering ``stop_profile``, before it stops its profiler (Kineto's
stop holds the GIL, 0.8-1 s for a two-second rollout on verl's CPU example). A real wait, not one loop turn:
Ray sends the answer from another thread of the process, which needs the GIL to do it, and after a bare loop
turn the stop often won it first (2 of 4 profiled steps in two runs of verl's CPU trainer, each 0.8 s longer: the
trainer's ``gen`` ended with the replica's stop, not with its generate call). With 10 ms, 6 of 6 answered
at once. 50 ms lost a server's last capture when Ray destroyed its actor meanwhile; 10 ms did not, in four
runs of ``test_verl_run_end``'s runner-owned actors. If the loop cancels the pending close as the actor
ends, the close runs then, on the loop's thread (:meth:`RolloutDistProfiler._close_after_answer`)."""


class RolloutDistProfiler(DistProfiler):
    """The profiler of one rollout replica's server (made by :func:`build_rollout_dist_profiler`).

    The replica is a participant of the run like a training rank: its ``process`` record carries its
    ``replica_rank``, and what it does between ``start()`` and ``stop()`` — generating the step's
    rollouts — is the region ``rollout_generate`` of that step. verl's trainer starts and stops a
    replica without a step (``LLMServerManager.start_profile()``): the step is the one the trainer
    began on its training workers just before (:func:`run_signals.current_step`), else the count of
    starts. A replica never hears the trainer's last step, so ``stop()`` never finalizes (the run's
    watcher does, see the module doc) and its finish hook runs once, when it is finalized.

    Where an inference engine generates in its own processes (verl's vLLM server,
    :mod:`rlprof.integrations.verl.vllm_server`), the engine's profiler captures instead of the
    backend: the server calls :meth:`engine_kwargs` when it builds the engine and
    :meth:`start_engine`/:meth:`stop_engine` instead of ``start()``/``stop()``. They go through the
    replica participant :class:`rlprof.integrations.engines.replica.EngineReplica`, built once on
    this profiler's :class:`rlprof.Profiler`, which decides (replica ranks, discrete, the token
    window), records ``rollout_generate`` and files the engine's traces in the run's layout.
    """

    _generating = None
    _engine = None
    _engine_failed = False
    """The :class:`EngineReplica`, once the server asked for its engine's settings or started it, else None."""
    _requests: Any = None
    """The replica's own :class:`~rlprof.integrations.engines.requests.ReplicaRequests` where no engine participant
    was built (:meth:`engine_requests`; False: it could not be made)."""
    _closing: "asyncio.Task | concurrent.futures.Future | None" = None
    """The step's close (the backend stops and writes its capture), pending after ``stop_profile``
    answered (:meth:`stop`): a task on the server's event loop, or the close handed to the server's
    generating thread (``stop(executor=...)``); the next :meth:`start` or :meth:`finalize` waits for it."""

    regions_by_request = False
    """The server's own calls are the replica's regions (:mod:`rlprof.integrations.verl.server_regions`, set at
    its first weight sync): no step-long ``rollout_generate``, and the step ends after the next sync."""
    _pause: Any = None
    """The ``rollout_weight_pause`` region open since the sync's abort, until its resume."""
    _held = False
    """The server is paused: an abort no resume has ended yet, whether or not a step was profiled then."""
    _stop_after_sync: Any = None
    """The ``stop()`` verl asked for just before a weight sync, run when that sync has ended."""

    def __init__(self, *args: Any, engine: str | None = None, **kwargs: Any):
        self.engine = engine
        """The engine adapter's name when an inference engine generates for this replica (its own
        profiler captures; no backend runs here), else None (generation runs in this process)."""
        super().__init__(*args, **kwargs)

    def _send_timings(self) -> None:
        """Its request records only (:meth:`record_requests`, :meth:`served`), every step, to the run's driver as a
        training worker's timings go. Not its region timings: verl tells a replica only of profiled steps, so they
        would say nothing of the others; the trainer times the rollout as it waits for it
        (:mod:`rlprof.integrations.verl.step_metrics`)."""
        times = self._prof.timings
        if times is not None:
            super()._send_timings()
            times.requests_only = True

    # ------------------------------------------------------------------ request records

    def record_requests(self, records: Any, version: int | None = None) -> None:
        """Requests this replica's server served (:class:`rlprof.request_records.RequestRecord`, times on the run's
        clock), handed on to the run's driver (docs/engines.md, "Request records"): where the rollout is timed,
        every step. Each gets this replica's rank and, where it names no step, :meth:`step_of` ``version``. Call
        before the generate call that served them returns. For a server that times its requests itself (the CPU
        example's ``hf`` server); an engine's outputs go through :meth:`served`."""
        step = self.step_of(version)
        for record in records:
            record.replica = self.rank
            if record.step is None:
                record.step = step
        self._prof.record_requests(records)

    def step_of(self, version: int | None) -> int | None:
        """The step of a request generated with the weights of parameter ``version`` (the server's
        ``global_steps``): ``version + 1``, the step those weights serve (verl's trainers sync the weights of step
        N after it, for step N + 1; the fully async replica's step N + 1 runs on version N). Without a version,
        the step in progress here (a profiled step), else None: the driver gives the request the step whose
        window holds its arrival."""
        if version is not None:
            return int(version) + 1
        return self._prof.current_step

    def engine_requests(self) -> Any:
        """The replica's :class:`~rlprof.integrations.engines.requests.ReplicaRequests` (its engine adapter's
        records: the profiled replica's participant's, else its own, made once), or None without an engine."""
        if self.engine is None:
            return None
        if self._engine is not None:
            return self._engine.requests
        if self._requests is None:
            from rlprof.integrations.engines.requests import ReplicaRequests

            try:
                self._requests = ReplicaRequests(self._prof, self.engine, self.rank)
            except Exception as exc:  # never the server's failure: it serves without records
                self._engine_failed_requests(exc)
        return self._requests or None

    def _engine_failed_requests(self, exc: BaseException) -> None:
        log.warning("rlprof: rollout replica %s: no request records from its %s engine (%s: %s)", self.rank,
                    self.engine, type(exc).__name__, exc)
        self._requests = False

    def request_kwargs(self) -> dict[str, Any]:
        """What the engine's constructor needs to keep per-request stats (vLLM: log stats on), wherever the rollout
        is timed; empty elsewhere."""
        requests = self.engine_requests()
        return dict(requests.kwargs()) if requests else {}

    def served(self, outputs: Any, version: int | None = None) -> int:
        """The engine's ``outputs`` of a finished request (or a generate call): a record each, handed on
        (:meth:`step_of` ``version``). How many."""
        requests = self.engine_requests()
        if not requests:
            return 0
        return requests.served(outputs, self.step_of(version) if version is not None else None)

    def _world_size(self, rank: int, config: Any, kwargs: Mapping[str, Any]) -> int:
        """No replica is told how many replicas there are (``WORLD_SIZE`` counts GPU ranks): at least
        as many as that and the replica ranks named, so none of them is outside."""
        known = int(kwargs.get("world_size") or os.environ.get("WORLD_SIZE") or 0)
        return max(known, covering_world(rank, config))

    def _backends(self, config: Any) -> Any:
        """An engine stands in for the rollout backend (no torch.profiler here); a tool no engine stands in
        for (nsys) captures nothing in a replica, and says why: only the region is timed. Generation in
        this process (no engine) with torch or npu: the real backends."""
        from rlprof.integrations.engines.stand_in import engine_backends, engine_captures

        if not config.global_.tools or (self.engine is None and engine_captures(config)):
            return None
        return engine_backends(config)

    def start(self, **kwargs: Any) -> None:
        self._closed_first(kwargs.get("profile_step"))
        if kwargs.get("profile_step") is None:
            step = run_signals.current_step(self._prof.run.run_id)
            if step is not None:
                kwargs["profile_step"] = step
        super().start(**kwargs)
        if self._rlprof_live and self._generating is None and not self.regions_by_request:
            self._generating = self._prof.unsampled_role("rollout", "generate")
            self._generating.__enter__()

    def stop(self, run_command: bool | None = None, *, executor: "concurrent.futures.Executor | None" = None) -> None:
        """The replica's generating ends; the capture closes on the thread that started it (Kineto
        keeps its session there), after ``stop_profile`` has answered, while the trainer updates: the
        step does not wait for the replica's trace.

        * ``executor``: a server that generates on a thread of its own (one worker; it ran ``start()``
          there) hands it the close: ``stop()`` returns at once, and the server's event loop stays free
          for the calls that come meanwhile (verl's weight sync). The stop itself runs without the GIL
          where the torch backend can (rlprof_torch.nogil), so the loop's thread runs Python meanwhile.
        * called from the server's event loop (verl's ``async def stop_profile``, a Ray call the trainer
          waits for), where generation runs on the loop's thread: the close runs ``ANSWER_GRACE_S`` after
          the answer, on that thread; the loop waits for it (a thread inside a C call, GIL or not,
          runs no loop), so a call arriving meanwhile waits for the stop.
        * elsewhere it closes at once.

        A server whose calls are the regions (:attr:`regions_by_request`) ends the step after the weight
        sync that follows (:meth:`sync_ended`), so that the version's pause is in its step; not one paused since
        before its step began (verl's V1 separate_async switches the trainer's own replica back to training at the
        top of a step and resumes it only when it lends it to rollout again, maybe never): no pause of the step is
        left to wait for, and a stop waiting for that resume kept the replica inside its step until the run ended
        (never finalized, its capture lost)."""
        paused_before = self._held and self._pause is None
        if self.regions_by_request and self._rlprof_live and self._stop_after_sync is None and not paused_before:
            self._stop_after_sync = functools.partial(self._stop_now, run_command, executor=executor)
            return
        self._stop_now(run_command, executor=executor)

    def pause_began(self, region: Any = None) -> None:
        """The weight sync paused the server (its abort returned): ``region`` (None outside a profiled step) stays
        open until :meth:`sync_ended`."""
        self._held = True
        if region is not None and self._pause is None:
            region.__enter__()
            self._pause = region

    def sync_ended(self) -> None:
        """The weight sync resumed the server: the pause ends, then a step verl stopped before the sync."""
        self._held = False
        pause, self._pause = self._pause, None
        if pause is not None:
            pause.__exit__(None, None, None)
        deferred, self._stop_after_sync = self._stop_after_sync, None
        if deferred is not None:
            deferred()

    def _stop_now(self, run_command: bool | None = None, *, executor: "concurrent.futures.Executor | None" = None) -> None:
        if executor is not None:
            if not self.closing():  # else the close already handed over ends this step
                self._closing = executor.submit(self._close)
                self._closing.add_done_callback(_log_failed_close)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self._generating is None or self._closing is not None:
            self._close()
            return
        self._closing = loop.create_task(self._close_after_answer())

    async def _close_after_answer(self) -> None:
        # the loop idle a moment first: Ray sends the awaited call's answer then, and the trainer's next
        # calls get going before the profiler's stop holds this process's GIL
        try:
            await asyncio.sleep(ANSWER_GRACE_S)
        finally:
            # after the grace, or cancelled because the loop is ending (the actor goes): close now, on the
            # loop's thread; unless _closed_first ran this close itself (then a next step may be open)
            if self._closing is asyncio.current_task():
                self._closing = None
                self._close()

    def _close(self) -> None:
        generating, self._generating = self._generating, None
        if generating is not None:
            generating.__exit__(None, None, None)
        super().stop(run_command=False)
        if self._enable:
            process_profilers().due(self)  # runs once, when the replica's profiling is finalized

    def _closed_first(self, step: int | None = None, why: str = "the next generate call") -> None:
        """Run a close still pending (:meth:`stop`) now, on this thread when it is the loop's (the close
        has not begun: the loop runs one thing at a time), else on the loop, waited for (bounded). The
        wait is a ``profiling_wait`` record: profiling's cost, not the generate call's."""
        if not self.closing():
            self._closing = None
            return
        closing = self._closing
        began = time.time_ns()
        if isinstance(closing, concurrent.futures.Future):  # on the server's generating thread (FIFO: never this one)
            try:
                closing.result(FINALIZE_WAIT_S)
            except Exception:  # still running after the wait, or it raised (logged): the session's finalize closes what is open
                pass
            self._closing = None
        elif not wait_on_its_loop(closing):  # on the loop's own thread, or its loop stopped: the close never began
            closing.cancel()
            self._closing = None
            self._close()
        self._prof.record_wait(self._prof.plan.tools[0] if self._prof.plan.tools else "rollout", began,
                               time.time_ns(), step=step, replica_rank=self.rank,
                               reason=f"{why} waited for the previous capture's export")

    # ------------------------------------------------------------------ an engine's own profiler

    def engine_replica(self):
        """The participant that drives this replica's engine profiler, or None when there is no engine,
        this replica is not profiled (``enable`` off, its replica rank not selected) or the participant
        could not be built (an error record says why; the server runs unprofiled). Built once."""
        if self.engine is None or self._engine_failed or not (self._enable and self._this_rank and self._prof.active):
            return None
        from rlprof.integrations.engines.stand_in import engine_captures

        if not engine_captures(self._prof.config):  # no engine profiler for this tool: start() and stop() time the region
            return None
        if self._engine is None:
            try:
                from rlprof.integrations.engines.replica import EngineReplica

                self._engine = EngineReplica(replica_rank=self.rank, num_replicas=self.world_size, engine=self.engine,
                                             run_id=self._prof.run.run_id, profiler=self._prof)
            except Exception as exc:
                self._engine_failed = True
                self._contain("settings", exc)
        return self._engine

    def _contain(self, call: str, exc: BaseException) -> None:
        """rlprof's side of an engine call raised: an error record and a log line; the server goes on."""
        message = (f"rollout replica {self.rank}: rlprof could not drive the {self.engine} engine's profiler "
                   f"({call}): {type(exc).__name__}: {exc}; the server goes on")
        log.error("rlprof: %s", message)
        self._prof.record_error(self.engine, call, message, kind="engine", replica_rank=self.rank)

    def engine_timed(self) -> bool:
        """No engine profiler captures on this replica (the tool is not one an engine stands in for: nsys),
        but the replica is selected: :meth:`start_engine`/:meth:`stop_engine` time ``rollout_generate``."""
        from rlprof.integrations.engines.stand_in import engine_captures

        return self._enable and self._this_rank and self._prof.active and not engine_captures(self._prof.config)

    def engine_profiled(self) -> bool:
        """The engine's profiler captures on this replica on some step (what verl's ``_should_profile()`` asks)."""
        replica = self.engine_replica()
        return replica is not None and replica.settings is not None

    def engine_kwargs(self) -> dict[str, Any]:
        """What to merge into the engine's constructor arguments (vLLM: ``{"profiler_config": {...}}``
        with its directory inside the run directory); empty when this replica is never profiled."""
        replica = self.engine_replica()
        return replica.engine_kwargs() if replica is not None else {}

    async def start_engine(self, engine: Any, **kwargs: Any) -> None:
        """verl's ``start_profile(**kwargs)`` on the server of ``engine`` (the engine object): the step
        (``profile_step``, else the one the trainer began, else the count of starts) begins on this
        replica, and the engine's profiler starts when the core selects it. verl's other keyword
        arguments (vLLM's ``profile_prefix``, a per-call window) are the core's to decide: ignored."""
        replica = self.engine_replica()
        if replica is None:
            if self.engine_timed():
                self.start(**kwargs)
            return
        step = kwargs.get("profile_step")
        if step is None:
            step = run_signals.current_step(self._prof.run.run_id)
        try:  # no step said: the Profiler counts starts
            await replica.start_async(engine, step=int(step) if step is not None else None)
        except Exception as exc:  # the participant contains the engine's failures; this is for its own
            self._contain("start_profile", exc)

    async def stop_engine(self, engine: Any) -> None:
        """verl's ``stop_profile()``: the engine's profiler stops, what it wrote goes into the run's
        layout and manifest, the step ends on this replica. Never the end of the run (see ``stop``)."""
        replica = self._engine
        if replica is None:
            if self.engine_timed():
                self.stop()
            return
        try:
            await replica.stop_async(engine)
        except Exception as exc:
            self._contain("stop_profile", exc)
        process_profilers().due(self)

    def closing(self) -> bool:
        return self._closing is not None and not self._closing.done()

    def finalize(self) -> list[dict[str, Any]]:
        self.sync_ended()  # a pause or a stop still waiting for the sync's end: the run ends first
        self._closed_first(why="the end of the run")
        if self._engine is not None:
            self._engine.finalize()
        return super().finalize()


def _log_failed_close(future: concurrent.futures.Future) -> None:
    """A close handed to a server's thread raised (rlprof's side: the backends' own errors are records)."""
    exc = None if future.cancelled() else future.exception()
    if exc is not None:
        log.error("rlprof: a rollout replica's capture close failed: %s: %s", type(exc).__name__, exc)


def build_rollout_dist_profiler(replica_rank: int, replica_world_size: int, config: Any = None,
                                tool_config: Any = None, engine: str | None = None) -> DistProfiler:
    """A :class:`RolloutDistProfiler` for rollout replica ``replica_rank`` whose engine spans
    ``replica_world_size`` GPUs. ``ranks`` count **replica** ranks, the rule of verl's profiling guide
    and of every rlprof Profiler (verl 0.9.1's own function reads them as global GPU ranks and selects
    the replica owning one, ``rank // replica_world_size``: docs/verl.md, "Deliberate differences").
    Where the two readings would select different replicas, a warning says so once per process, with
    the replica ranks verl's reading meant. A replica is never told how many replicas there are, so a
    rank past the last replica selects nothing here; ``rlprof check --world-size N`` names it as an
    error. ``ranks: []`` selects no replica (rlprof's rule). The caller's config is not changed.
    ``engine`` names the engine adapter when an inference engine generates for the replica and its own
    profiler captures (verl's vLLM server: ``"vllm"``, see :mod:`rlprof.integrations.verl.vllm_server`);
    then no backend runs in this process."""
    if config is None:  # verl's server dropped its section (a tool other than torch/npu): the rollout's, as published
        from rlprof.integrations.verl.run_id import shared_run_id
        from rlprof.runtime.run_id import run_id_for

        shared = shared_run_id()
        config = run_signals.rollout_section(run_id_for(shared)) if shared else None
        tools = tools_of(config)
        tool_config = (field(config, "tool_config") or {}).get(tools[0]) if tools else None
    if config is not None and not field(config, "all_ranks", False):
        _warn_if_read_as_global(list(field(config, "ranks", None) or []), replica_world_size)
    return RolloutDistProfiler(rank=replica_rank, config=config, tool_config=tool_config, save_file_prefix="rollout",
                               replica_rank=replica_rank, engine=engine)


def _warn_if_read_as_global(ranks: list[Any], gpus_per_replica: int) -> None:
    """Say once when ``ranks``, read as global GPU ranks (verl 0.9.1), would select other replicas."""
    if not gpus_per_replica or gpus_per_replica < 2 or not all(isinstance(r, int) for r in ranks):
        return
    as_global = sorted({r // gpus_per_replica for r in ranks})
    if as_global == sorted(set(ranks)):
        return
    key = "actor_rollout_ref.rollout.profiler.ranks"
    say_once(f"rollout ranks read as replica ranks: {sorted(set(ranks))} / {gpus_per_replica}", log,
             "rlprof: %s: %s count replica ranks (verl's profiling guide; verl 0.9.1's own code reads global GPU "
             "ranks): replicas %s are profiled. If you meant global GPU ranks, with %d GPUs per replica they are "
             "held by replicas %s: write ranks: %s", key, sorted(set(ranks)), sorted(set(ranks)), gpus_per_replica,
             as_global, as_global)
