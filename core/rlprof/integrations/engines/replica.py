"""The replica participant: rlprof inside one rollout replica whose inference engine profiles itself.

In agent-loop mode (verl's default) each rollout replica is its own process (a Ray actor) holding an
inference engine (vLLM ``LLM``/``AsyncLLM``, SGLang). rlprof cannot run torch.profiler there beside
the engine's own; the engine's profiler captures instead, driven from outside as verl drives it.
:class:`EngineReplica` is what such a process holds::

    replica = EngineReplica(config, replica_rank=r, num_replicas=n, run_id=run_id)
    llm = vllm.LLM(model, **replica.engine_kwargs(), ...)    # before the engine is built
    for step in steps:
        replica.start(llm, step)           # async engines: await replica.start_async(engine, step)
        outputs = llm.generate(...)
        replica.stop(llm)                  # async engines: await replica.stop_async(engine)
    replica.finalize()                     # async engines: await replica.finalize_async()

or, when the caller must make the engine calls itself (verl's server awaits ``engine.start_profile()``)::

    capture = replica.begin(step)          # None: not profiled (the region is still timed when profiled)
    if capture is not None: await adapter.start(engine, capture) ...
    replica.end(error=None)                # after the engine stopped

What the core decides, as for any rank: which replicas (rollout ``ranks`` count **replica** ranks),
which steps (``global_profiler.steps``), discrete mode only (one capture per generate call), and the
token window (``profile_token_start``/``profile_token_end`` → the engine's ``(delay_iterations,
max_iterations)`` = ``(start, end - start)``, as verl maps it). The engine adapter
(:mod:`rlprof.integrations.engines.contract`) only translates settings and calls.

How it reuses the session: the replica's :class:`~rlprof.Profiler` hosts the role ``rollout``, and the
engine **stands in for the rollout backend** (``torch``/``npu``): the session's backend of that name is
an :class:`EngineStandIn`, not the real backend, so no torch.profiler runs in the replica. Its
``start_role`` (the capture of ``rollout_generate`` opens) hands the capture to the participant; its
``stop_role`` (the capture closes) moves what the engine wrote into the capture's directory and
returns the files, which the session lists as artifact records (role ``rollout``, the step, and
``replica_rank``/``engine`` fields). Capture directories, timing records (``rollout_generate``), error
records, fault isolation and ``rlprof report`` all apply unchanged.

Failures never reach the caller: an engine that cannot start its profiler, fails to stop, or dies is an
``error`` record (kind ``engine``) naming the engine and the call; a dead engine (``adapter.lost``) is
never asked again. Files the engine already wrote are moved, never lost. A directory the engine
cannot write in (vLLM says nothing about it) is checked before the engine is built; if it fails, the
replica is not profiled and an error record says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from enum import Enum, unique
from pathlib import Path
from typing import Any

from rlprof.config.sections import ENGINE_TOOLS
from rlprof.integrations.engines.contract import EngineCapture, EngineRequest, EngineSettings, load_engine
from rlprof.integrations.engines.files import move_into, remove_empty, unwritable
from rlprof.integrations.engines.plain_traces import PlainTraces
from rlprof.integrations.engines.requests import ReplicaRequests
from rlprof.integrations.engines.stand_in import EngineStandIn, Inert, engine_backends
from rlprof.runtime.run_id import in_ray
from rlprof.integrations.loops import FINALIZE_WAIT_S, wait_on_its_loop

log = logging.getLogger("rlprof")

REGION = ("rollout", "generate")
"""The region a replica's generate call is: ``rollout_generate``."""


@unique
class ReplicaState(Enum):
    """Whether a replica profiles: :attr:`EngineReplica.state`, the one field every question reads."""

    UNPROFILED = "this replica's rollout is never profiled (not selected, or no profiling): steps run, nothing is captured"
    FOREIGN = ("the Profiler's rollout backend is not the engine's stand-in: the replica leaves the Profiler alone "
               "(no step, no region)")
    TIMED = ("no selected tool can capture a replica (:func:`~rlprof.config.sections.replica_not_captured`): steps "
             "and the rollout_generate region are recorded, each capture is skipped with that reason")
    CAPTURES = "the engine's profiler captures on the profiled steps"
    ENGINE_OFF = ("the engine does not profile (its directory is not writable, or it died): steps and the "
                  "rollout_generate region are still recorded, each capture is skipped with a reason")


class EngineReplica:
    """rlprof in one rollout replica (see the module doc).

    :param config: anything :func:`rlprof.config.schema.load_config` accepts (a verl-style dict, YAML
        path, OmegaConf, :class:`~rlprof.config.schema.ProfilerConfig`); ignored when ``profiler`` is given.
    :param replica_rank: this replica's index; ``num_replicas`` how many there are.
    :param engine: the engine adapter's name (entry-point group ``rlprof.engines``): ``vllm``, ``sglang``.
    :param run_id: the run's id (shared with the trainer); default: :func:`rlprof.runtime.run_id.run_id_for`'s.
    :param profiler: an existing :class:`~rlprof.Profiler` of this replica (roles include ``rollout``,
        ``replica_rank`` set), built with ``backends=engine_backends(config)`` so that the engine stands
        in for the rollout backend (verl's ``RolloutDistProfiler`` owns one). The replica does not
        finalize a profiler it was given unless :meth:`finalize` is called.
    """

    def __init__(self, config: Any = None, *, replica_rank: int, num_replicas: int, engine: str = "vllm",
                 run_id: str | None = None, profiler: Any = None):
        self.replica_rank = replica_rank
        self.num_replicas = num_replicas
        self.engine_name = engine
        if profiler is None:
            from rlprof.config.schema import load_config
            from rlprof.runtime.profiler import Profiler

            loaded = load_config(config)
            profiler = Profiler(loaded, rank=replica_rank, world_size=num_replicas, roles=("rollout",),
                                replica_rank=replica_rank, num_replicas=num_replicas, run_id=run_id,
                                backends=engine_backends(loaded))
            profiler.driven = True  # its driver (the Ray controller, verl's trainer) decides unplanned captures
            from rlprof.integrations.step_mailbox import send_to_driver

            send_to_driver(profiler)  # a replica actor's timings: to its driver's step metrics
        self.profiler = profiler
        """The owner of this replica's step (``current_step``) and open capture (``open_capture_id``)."""
        self.adapter: Any = None
        self.state = ReplicaState.UNPROFILED
        """Whether this replica profiles: the one answer (see :class:`ReplicaState`)."""
        self._settings: EngineSettings | None = None
        """The adapter's settings for the engine (from :attr:`ReplicaState.CAPTURES` on)."""
        self._request: EngineRequest | None = None
        self._directory: Path | None = None
        """The engine's own directory inside the run directory (removed at the end when empty)."""
        self._captures_by_id: dict[str, EngineCapture] = {}
        """The machine's capture id -> the engine's capture for it, while the machine holds it open."""
        self._failed: str | None = None
        """Why the capture in progress wrote nothing (its start or stop failed), or None."""
        self._generating: Any = None
        self._engine: Any = None
        """A sync engine between :meth:`start` and :meth:`stop`: the stand-in's hooks call its profiler, so
        the region's time is the generate call's own (the session stamps it after the capture opened and
        before it closes, as for any backend)."""
        self._captures = 0
        self._exporting: asyncio.Task | None = None
        """The engine's stop of the last capture (its trace export), running in the background on the
        replica's event loop while the trainer updates (:meth:`stop_async`); awaited by the next
        :meth:`start_async` and by :meth:`finalize_async`."""
        self._unfinished = False
        """The run ended during an export: what the engine has written so far is left where it is."""
        self._exported_ns: int | None = None
        """When the last deferred stop (:meth:`stop`) ended, for the wait of a call sent before it."""
        self.plain_traces = PlainTraces(self.profiler, engine, replica_rank, FINALIZE_WAIT_S)
        """The engine's plain JSON traces, compressed off the engine (:func:`~rlprof.integrations.engines.files.move_into`)."""
        self.requests = ReplicaRequests(self.profiler, engine, replica_rank)
        """Its request records, every step the rollout is timed (:meth:`served`)."""
        if not profiler.active and "rollout" in profiler.plan.armed:
            profiler.capture((), "armed")  # an armed run: the engine is built able to capture a step asked for later
        if profiler.active and "rollout" in profiler.plan.selected_roles:
            self._prepare()

    # ------------------------------------------------------------------ before the engine is built

    def _prepare(self) -> None:
        """Find the stand-in, load the adapter, check the engine's directory, ask for its settings."""
        prof = self.profiler
        backends = prof.backends
        tool = next((t for t in prof.plan.tools if t in ENGINE_TOOLS), None)
        stand_in = backends.plugins.get(tool) if backends is not None and tool else None
        if tool is None and backends is not None and all(isinstance(p, Inert) for p in backends.plugins.values()):
            self.state = ReplicaState.TIMED  # engine_backends' inert tools: each capture is a skip saying why
            return
        if not isinstance(stand_in, EngineStandIn):
            # verl: "agent loop only support torch and npu profiler". A Profiler built with the real backends
            # would run torch.profiler beside the engine's: this replica then leaves it alone entirely.
            self.state = ReplicaState.FOREIGN
            message = (f"rollout replica {self.replica_rank}: the engine's profiler stands in for global_profiler.tool "
                       f"{' or '.join(ENGINE_TOOLS)} only, in a Profiler built with backends=engine_backends(config); "
                       f"tools here: {', '.join(prof.plan.tools)}: the replica's rollout is not profiled")
            prof.record_warning(self.engine_name, message, key="global_profiler.tool")
            log.warning("rlprof: %s", message)
            return
        stand_in.participant = self
        self.adapter = load_engine(self.engine_name)
        run = prof.run
        directory = self._directory = run.run_dir / "_engine" / f"replica{self.replica_rank}-{run.host}-{run.pid}"
        problem = unwritable(directory, run.run_dir)
        if problem is not None:
            self.state = ReplicaState.ENGINE_OFF
            prof.record_error(self.engine_name, "settings", f"rollout replica {self.replica_rank}: the engine's "
                              f"profiler directory {directory} is not writable ({problem}): this replica is not profiled")
            return
        tool_config = dict(prof.tool_configs.get("rollout", {}).get(tool, {}))
        role = prof.config.roles["rollout"]
        self._request = EngineRequest(tool=tool, contents=tuple(tool_config.get("contents") or ()),
                                      tool_config=tool_config, directory=str(directory),
                                      window=token_window_of(prof.plan.roles["rollout"].schedule),
                                      config_key=f"{role.key_path}.tool_config.{tool}")
        self._settings = self.adapter.settings(self._request)
        self.state = ReplicaState.CAPTURES
        for key, message in self._settings.warnings:
            prof.record_warning(self.engine_name, f"{key}: {message}", key=key)
            log.warning("rlprof: rollout engine %s: %s: %s", self.engine_name, key, message)

    @property
    def settings(self) -> EngineSettings | None:
        """The adapter's settings for this replica's engine; None when this replica is never profiled."""
        return self._settings

    def engine_kwargs(self) -> dict[str, Any]:
        """What to merge into the engine's constructor arguments: its profiler's settings where it profiles, its
        per-request stats where the rollout is timed (empty when neither)."""
        return {**self.requests.kwargs(), **(self._settings.engine_kwargs if self._settings is not None else {})}

    def served(self, outputs: Any) -> int:
        """The engine's outputs of this generate call: a request record each, for the step in progress (call before
        :meth:`end`/:meth:`stop`). How many (0 where the adapter supplies none)."""
        return self.requests.served(outputs)

    # ------------------------------------------------------------------ one generate call

    def begin(self, step: int | None = None) -> EngineCapture | None:
        """A generate call of ``step`` (default: the count of calls) begins: opens the step and the region
        ``rollout_generate`` (timed whenever the step is profiled here). Returns the capture to start on
        the engine, or None when nothing is to be captured (not this replica, not this step, the engine
        is dead). Pair with :meth:`end`."""
        if self.state is ReplicaState.FOREIGN:
            return None
        prof = self.profiler
        if prof.current_step is not None:
            self.end()
        self._failed = None
        prof.start_step(None if step is None else int(step))  # None: the Profiler counts the calls
        region = prof.unsampled_role(*REGION)  # the engine's own window samples, not rlprof's machine
        if region.enters:  # profiled, or timed for the step metrics (an unprofiled step)
            region.__enter__()  # the stand-in's start_role builds the engine's capture when the machine opens one
            self._generating = region
        return self.capture

    @property
    def capture(self) -> EngineCapture | None:
        """The engine's capture of the capture the machine holds open now, or None (asked, not mirrored)."""
        opened = self.profiler.open_capture_id
        return self._captures_by_id.get(opened) if opened is not None else None

    def end(self, error: BaseException | None = None) -> None:
        """The generate call ended (``error``: it raised), after the engine's profiler stopped: closes
        the region (the stand-in moves the engine's files into the layout) and the step."""
        if self.profiler.current_step is None:
            return
        generating, self._generating = self._generating, None
        if generating is not None:
            generating.__exit__(type(error) if error else None, error, None)
        self.profiler.step_boundary()

    def start(self, engine: Any, step: int | None = None, sent_ns: int | None = None) -> EngineCapture | None:
        """:meth:`begin` with the engine's profiler started as the capture opens (a sync engine: vLLM
        ``LLM``); the region ``rollout_generate`` then times the generate call alone.

        ``sent_ns`` (``time.time_ns()``): when the caller asked for this generate call. A replica that
        runs its previous :meth:`stop` after answering (the demo's replica actor: the stop is queued
        behind the answer, so the engine writes its trace while the trainer updates) finishes that stop
        before this call runs; the part of it after ``sent_ns`` is a ``profiling_wait`` record."""
        if sent_ns is not None and self._exported_ns is not None and self._exported_ns > sent_ns:
            self._waited(sent_ns, self._exported_ns, step)
        self._exported_ns = None
        self._engine = engine
        self.requests.engine_ready(engine)
        try:
            return self.begin(step)
        except BaseException:
            self._engine = None
            raise

    def stop(self, engine: Any, error: BaseException | None = None) -> None:
        """:meth:`end`, the engine's profiler stopped as the capture closes (its trace is written then,
        counted as profiling's own time, not the region's)."""
        self._engine = engine
        try:
            self.end(error)
        finally:
            self._engine = None
            self._exported_ns = time.time_ns()

    async def start_async(self, engine: Any, step: int | None = None) -> EngineCapture | None:
        """:meth:`start` for an async engine (vLLM ``AsyncLLM``): awaits the adapter's call. The hooks cannot
        await, so here the region ``rollout_generate`` also holds the awaited start and the engine's stop.
        An export of the previous capture still running is awaited first: that wait is a
        ``profiling_wait`` record (profiling's cost, not the generate call's)."""
        await self.exported(step=step)
        self.requests.engine_ready(engine)
        capture = self.begin(step)
        if capture is not None:
            await self._call_async("start", engine, capture)
        return capture

    async def stop_async(self, engine: Any, error: BaseException | None = None) -> None:
        """:meth:`stop` for an async engine, returning once the engine has stopped collecting: the
        engine's ``stop`` (which writes its trace: vLLM 0.32 exports inside ``stop_profile``) then runs
        as a task on this event loop, while the trainer updates the actor, and closes the region and
        the step when the files are complete (the artifact records are written then). The generate
        call has returned, so the engine is idle and records nothing more until the next generate,
        which :meth:`start_async` holds until the export is done."""
        await self.exported()
        capture = self.capture
        if capture is None or self._failed is not None:
            self.end(error)
            return
        self._exporting = asyncio.get_running_loop().create_task(self._export(engine, capture, error))

    async def _export(self, engine: Any, capture: EngineCapture, error: BaseException | None) -> None:
        try:
            await self._call_async("stop", engine, capture)
        finally:
            self.end(error)

    async def exported(self, step: int | None = None, timeout: float | None = None,
                       why: str = "the next generate call") -> bool:
        """Wait for the export of the last capture, if one is running (at most ``timeout`` seconds);
        a wait is recorded as ``profiling_wait``. True when none is left running."""
        exporting = self._exporting
        if exporting is None:
            return True
        if not exporting.done():
            began = time.time_ns()
            try:
                await asyncio.wait_for(asyncio.shield(exporting), timeout)
            except asyncio.TimeoutError:
                return False
            finally:
                self._waited(began, time.time_ns(), step, why)
        self._exporting = None
        return True

    def _waited(self, start_ns: int, end_ns: int, step: int | None, why: str = "the next generate call") -> None:
        self.profiler.record_wait(self.engine_name, start_ns, end_ns, step=step, replica_rank=self.replica_rank,
                                  reason=f"{why} waited for the previous capture's export")

    def failed(self, call: str, exc: BaseException) -> None:
        """Record that the adapter's ``call`` (``start``/``stop``) raised ``exc`` (for callers that make
        the engine calls themselves): an error record; a dead engine is not asked again."""
        lost = False
        try:
            lost = bool(self.adapter.lost(exc)) if self.adapter is not None else False
        except Exception:  # an adapter's own bug must not reach training
            pass
        if lost:
            self.state = ReplicaState.ENGINE_OFF
        what = "the engine is gone, no further capture on this replica" if lost else "this capture is lost"
        self._failed = f"{call}_profile failed: {type(exc).__name__}: {exc}"
        step = self.profiler.current_step
        self.profiler.record_error(self.engine_name, f"{call}_profile",
                                   f"rollout replica {self.replica_rank}, step {step}: {type(exc).__name__}: {exc} "
                                   f"({what}); training goes on", kind="engine", replica_rank=self.replica_rank,
                                   step=step, lost=lost)
        log.error("rlprof: rollout engine %s on replica %d: %s_profile raised %s: %s (%s); training goes on",
                  self.engine_name, self.replica_rank, call, type(exc).__name__, exc, what)

    def _call(self, call: str, engine: Any, capture: EngineCapture) -> None:
        try:
            result = getattr(self.adapter, call)(engine, capture)
            if result is not None and hasattr(result, "__await__"):
                raise TypeError(f"{self.engine_name}.{call} returned an awaitable: use {call}_async for an async engine")
        except Exception as exc:
            self.failed(call, exc)

    async def _call_async(self, call: str, engine: Any, capture: EngineCapture) -> None:
        try:
            result = getattr(self.adapter, call)(engine, capture)
            if result is not None and hasattr(result, "__await__"):
                await result
        except Exception as exc:
            self.failed(call, exc)

    # ------------------------------------------------------------------ called by the stand-in

    def _opened(self, ctx: Any) -> None:
        """The session opened the capture of this generate call (the stand-in's start_role)."""
        if self.state is not ReplicaState.CAPTURES:
            ctx.skip(f"rollout engine {self.engine_name} of replica {self.replica_rank} is not profiling "
                     "(its profiler failed earlier, see the error records)")
            return
        self._captures += 1
        prefix = f"step{ctx.step}_replica{self.replica_rank}_c{self._captures}"
        capture = self._captures_by_id[ctx.capture.capture_id] = EngineCapture(
            prefix=prefix, directory=self._request.directory, request=self._request, window=self._request.window)
        if self._engine is not None:
            self._call("start", self._engine, capture)

    def _closed(self, ctx: Any) -> list[Path]:
        """The capture closes (the stand-in's stop_role): move what the engine wrote into the capture's
        directory; returns the moved files (the session lists them)."""
        capture = self._captures_by_id.pop(ctx.capture.capture_id, None)
        if capture is None:
            return []
        if self._engine is not None and self._failed is None:
            self._call("stop", self._engine, capture)
        if self._unfinished:
            ctx.skip(f"rollout engine {self.engine_name}, replica {self.replica_rank}: {self._failed}")
            return []
        try:
            written = list(self.adapter.written(capture))
        except Exception as exc:
            written = []
            self.profiler.record_error(self.engine_name, "written", f"{type(exc).__name__}: {exc}")
        moved = move_into(written, ctx, prefix=capture.prefix, replica_rank=self.replica_rank, engine=self.engine_name,
                          plain=self.plain_traces)
        if not moved:
            reason = self._failed or (f"the engine wrote no file for {capture.prefix} in {capture.directory}")
            ctx.skip(f"rollout engine {self.engine_name}, replica {self.replica_rank}: {reason}")
        return moved

    # ------------------------------------------------------------------ the end

    async def finalize_async(self, reason: str = "end", timeout: float = FINALIZE_WAIT_S) -> None:
        """:meth:`finalize` for a replica with an event loop: waits for an export still running first
        (at most ``timeout`` seconds)."""
        await self.exported(timeout=timeout, why="the end of the run")
        self.finalize(reason)

    def _await_from_another_thread(self) -> None:
        exporting = self._exporting
        if exporting is not None and not exporting.done():
            wait_on_its_loop(exporting, lambda: self.exported(timeout=FINALIZE_WAIT_S, why="the end of the run"))

    def finalize(self, reason: str = "end") -> None:
        """End the replica's run: close what is open, finalize the Profiler, remove the engine's (empty)
        directory. Idempotent. An export still running (:meth:`stop_async`) is waited for (at most
        :data:`FINALIZE_WAIT_S`) when this runs on another thread than the replica's event loop (verl's
        run-end watcher); past that, or on the loop's own thread, it is named as unfinished: an
        ``error`` record with the capture's step."""
        self._await_from_another_thread()
        exporting, self._exporting = self._exporting, None
        if exporting is not None and (not exporting.done() or exporting.cancelled()):
            step = self.profiler.current_step
            self.profiler.record_error(self.engine_name, "stop_profile",
                                       f"rollout replica {self.replica_rank}, step {step}: the engine's export was "
                                       "still running when the run ended: its files are not listed (unfinished)",
                                       kind="engine", replica_rank=self.replica_rank, step=step, unfinished=True)
            self._failed = "its export was still running when the run ended (unfinished): its files are not listed"
            self._unfinished = True
        try:
            if self.profiler.current_step is not None:
                self.end()
        finally:
            self.profiler.finalize(reason, wait_for_analysis=not in_ray())  # a replica's actor may end before the analysis
            if self._directory is not None:
                remove_empty(self._directory)


def token_window_of(schedule: Any) -> tuple[int, int] | None:
    """The rollout's ``profile_token_start/end`` (a :class:`~rlprof.config.schedule.Schedule` ``wait=start,
    active=end-start``) as the engine's ``(delay_iterations, max_iterations)``; None without one. Any
    other schedule has no engine equivalent: the whole generate call is captured."""
    if schedule is None:
        return None
    if schedule.skip_first or schedule.warmup or schedule.repeat != 1:
        log.warning("rlprof: the rollout's schedule %s has no equivalent in an engine's profiler (only "
                    "profile_token_start/end does); capturing whole generate calls", schedule)
        return None
    return (schedule.wait, schedule.active)
