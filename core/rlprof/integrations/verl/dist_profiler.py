"""``DistProfiler``: verl's per-worker profiler object, backed by one :class:`rlprof.Profiler`.

verl builds one per worker (``DistProfiler(rank, config=<role section>, tool_config=<the tool's
settings>, save_file_prefix=<worker role or model type>)``); its trainer calls ``start(profile_step=N)``
and ``stop(run_command=<last profiled step>)`` on profiled steps only; the update loop calls
``step()`` once per mini-batch; worker methods carry ``@DistProfiler.annotate(role=...)``.

What rlprof decides instead of verl (one rule set for every tool):

* rank selection: ``all_ranks``, else ``rank in ranks``; ``ranks: []`` collects nothing (the
  guides' rule — verl 0.9 falls back to rank 0 there), said once per process in a warning;
* output: ``<save_path>/<run id>/...`` with a manifest; every process of one training run uses the
  same run id (:func:`rlprof.integrations.verl.run_id.shared_run_id`);
* ``step()`` ends one iteration of the innermost sampled region (:meth:`rlprof.Profiler.next_iteration`),
  which is how ``tool_config.<tool>.schedule`` samples update mini-batches;
* the end: ``stop(run_command=True)`` — verl's trainers pass it on their last profiled step — finalizes
  every profiler of this process (once none of them is inside a step), then runs the finish hook. A
  process the trainer never says that to (a rollout replica's server) finalizes when another process of
  the run said it, or when the driver's entry point returned (:mod:`rlprof.integrations.verl.run_signals`):
  verl's workers are force-killed by Ray at the end of the job, without SIGTERM or atexit.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import os
import threading
import weakref
from typing import Any, Callable, Mapping

from rlprof.integrations.verl import global_keys, run_signals
from rlprof.integrations.verl.models import worker_module
from rlprof.integrations.verl.sections import field, hosted_roles, rlprof_source, tools_of
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


class _Process:
    """What this process keeps about its DistProfilers: one instance (:func:`_process`), a new one in
    a forked child. It holds only what no Profiler knows; the rest it asks them:

    * whether a DistProfiler is inside a step: its Profiler's :attr:`~rlprof.Profiler.current_step`;
    * whether it still profiles: its Profiler is active and not :attr:`~rlprof.Profiler.finalized`.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._members: "weakref.WeakKeyDictionary[DistProfiler, None]" = weakref.WeakKeyDictionary()
        """Every DistProfiler built in this process, in building order (weak: never keeps one alive)."""
        self._members_lock = threading.Lock()
        """The watcher thread reads the members while a worker may build one."""
        self.ending = threading.RLock()
        """Taken while the process's profiling is finalized (the trainer's call and the watcher thread may race)."""
        self.hooks_due: list[DistProfiler] = []
        """DistProfilers whose finish hook runs when this process's profiling is finalized: those told
        ``stop(run_command=True)`` (at once, unless a colocated one is still inside its step) and a
        replica's, after its first step (it never hears the last one)."""

    def add(self, profiler: "DistProfiler") -> None:
        with self._members_lock:
            self._members[profiler] = None

    def members(self) -> list["DistProfiler"]:
        """Every DistProfiler of this process still alive, in building order."""
        with self._members_lock:
            return list(self._members)

    def live(self) -> list["DistProfiler"]:
        """The DistProfilers that profile and are not finalized (colocated workers build several)."""
        return [p for p in self.members() if p._prof.active and not p._prof.finalized]

    def in_step(self) -> list["DistProfiler"]:
        """The DistProfilers between ``start()`` and ``stop()``, in building order. A replica told ``stop()``
        whose close is still pending is not: finalizing runs that close first (:meth:`RolloutDistProfiler.finalize`)."""
        return [p for p in self.members() if p._prof.current_step is not None and not p.closing()]

    def due(self, profiler: "DistProfiler") -> None:
        """``profiler``'s finish hook runs when this process's profiling is finalized (once)."""
        if profiler not in self.hooks_due:
            self.hooks_due.append(profiler)


_PROCESS = _Process()


def _process() -> _Process:
    """This process's :class:`_Process` (a forked child starts with an empty one: its parent's
    profilers and lock are not its own)."""
    global _PROCESS
    if _PROCESS.pid != os.getpid():
        _PROCESS = _Process()
    return _PROCESS


class DistProfiler:
    """verl's ``DistProfiler`` surface over an :class:`rlprof.Profiler` (see the module doc)."""

    _reads_module = False
    """A selected backend reads the region's model (:attr:`rlprof.runtime.registry.Backends.reads_module`),
    so annotated regions are handed the module verl's worker holds (:mod:`rlprof.integrations.verl.models`);
    asked once, when the first region is built (a live call: the process's backends exist then)."""

    _rlprof_live = False
    """A cache, derived from the Profiler (active, inside a step) and written only by :meth:`_sync_live`:
    the one attribute the decorated methods read when idle (asking the Profiler would cost a property
    call, and this read is the whole idle cost of ``annotate``, bench/bench_verl_annotate.py). Always
    set on the instance too: an instance attribute is found faster than a class attribute."""

    def __init__(self, rank: int, config: Any = None, tool_config: Any = None, save_file_prefix: str | None = None,
                 **kwargs: Any):
        from rlprof.config.schema import load_config
        from rlprof.runtime.plan import role_selected
        from rlprof.runtime.profiler import Profiler
        from rlprof.integrations.verl.run_id import shared_run_id

        if tool_config is None and config is not None:
            tool_config = field(config, "tool_config")
        self.rank = rank
        self.config = config
        self.tool_config = tool_config
        """As verl: the tool's settings (rollout servers read it to configure their engine's profiler)."""
        self.save_file_prefix = save_file_prefix
        self._rlprof_live = False
        self.roles = hosted_roles(save_file_prefix)
        self.role = self.roles[0]
        self._enable = bool(field(config, "enable", False))
        self._regions: dict[Any, Any] = {}

        world = self._world(rank, config, kwargs)
        cfg = load_config(rlprof_source(config, tool_config, self.roles, global_keys.received())).with_overrides(
            caller_steps=True)  # global_keys: rlprof's own global_profiler keys, from the trainer's config
        role_cfg = cfg.roles[self.role]
        role_selected(role_cfg, rank, world)  # ranks outside the world: an error naming the key (when enabled)
        # verl's check_this_rank: rank selection alone, whatever enable and tool say (its calls pair it
        # with check_enable()); ranks=[] selects no rank here (the guides' rule, warned about below)
        self._this_rank = role_cfg.all_ranks or rank in role_cfg.ranks
        if self._enable and role_cfg.collects_nothing(cfg.global_.tools):  # not said for precision_debugger: every rank
            say_once(
                f"verl: {role_cfg.key_path}.ranks is []", log,
                "rlprof: %s.ranks is [] and all_ranks is false, so this role collects nothing on any rank (the rule of "
                "verl's profiling guides; verl 0.9's own DistProfiler would profile rank 0): set ranks=[0] or all_ranks=true",
                role_cfg.key_path)
        self._world = world
        self._prof = Profiler(cfg, rank=rank, world_size=world, roles=self.roles, run_id=shared_run_id(),
                              replica_rank=kwargs.get("replica_rank"), num_replicas=kwargs.get("num_replicas"),
                              backends=self._backends(cfg))
        _process().add(self)
        if self._prof.plan.active:
            self._this_rank = self._this_rank or any(self._prof.plan.roles[r].selected for r in self.roles)
            run_id = self._prof.run.run_id
            run_signals.watch(run_id, functools.partial(_finalize_process, run_id), str(self._prof.run.run_dir))

    def _world(self, rank: int, config: Any, kwargs: Mapping[str, Any]) -> int:
        """The number of ranks: what the caller or the environment says (``world_size``, ``WORLD_SIZE``),
        so that ranks outside it are an error naming the key (DESIGN.md); when neither says it, as
        large as the ranks named."""
        known = int(kwargs.get("world_size") or os.environ.get("WORLD_SIZE") or 0)
        if known:
            return max(known, rank + 1)
        return _covering(rank, config)

    def _backends(self, config: Any) -> Any:
        """The backends of this process's Profiler: None, the selected tools' entry points."""
        return None

    def _sync_live(self) -> None:
        """Refresh the :attr:`_rlprof_live` cache from the Profiler (its only writer)."""
        prof = self._prof
        self._rlprof_live = prof.active and prof.current_step is not None and not prof.finalized

    # ------------------------------------------------------------------ verl's queries

    def check_enable(self) -> bool:
        """``enable`` of the role section."""
        return self._enable

    def check_this_rank(self) -> bool:
        """This rank is selected (``all_ranks`` or in ``ranks``), whatever ``enable`` and the tool say, as verl answers."""
        return self._this_rank

    def check_this_step(self) -> bool:
        """Between ``start()`` and ``stop()`` on a selected rank (and not finalized since): the Profiler's step."""
        return self._prof.current_step is not None

    def is_discrete_mode(self) -> bool:
        """One capture per annotated region (``tool_config.<tool>.discrete``) instead of one per step."""
        return bool(self._prof.config.roles[self.role].discrete)

    @property
    def profiler(self):
        """The underlying :class:`rlprof.Profiler`."""
        return self._prof

    # ------------------------------------------------------------------ verl's switches

    def start(self, **kwargs: Any) -> None:
        """A profiled training step begins (verl's trainer passes ``profile_step``; ``role`` is a label)."""
        step = kwargs.get("profile_step")
        if step is not None:  # a rollout replica's server, started next, hears no step: it reads this one
            run_signals.publish_step(self._prof.run.run_id, step)
        if not (self._enable and self._this_rank):
            return
        self._prof.start_step(int(step) if step is not None else None)  # None: the Profiler counts starts
        self._sync_live()

    def stop(self, run_command: bool | None = None) -> None:
        """The profiled step ends.

        ``run_command=True`` is what verl's trainers pass on their last profiled step: this process's
        profiling is finalized (every colocated profiler, once none of them is still inside the step;
        the backends write), then the finish hook runs, synchronously, on its ranks — which may include
        ranks that did not profile. Left out (verl's default ``True``, used by callers that do not know
        the last step) the finish hook runs as in verl, but nothing is finalized; ``False``: neither."""
        if self._enable and self._this_rank:
            self._prof.step_boundary()
            self._sync_live()
        if run_command is None:
            if self._enable:
                self._finish_hook()
            return
        if run_command:
            self._end_of_profiling()

    def _end_of_profiling(self) -> None:
        """The trainer's last profiled step ended here: finalize the process, then the finish hook."""
        if self._enable:
            _process().due(self)
        run_id = self._prof.run.run_id
        if self._prof.plan.active:
            run_signals.publish_done(run_id, run_signals.LAST)  # for the processes the trainer does not tell
        _finalize_process(run_id, run_signals.LAST, self.rank)

    def run_finish_hook(self, run_command: bool = True) -> None:
        """Run ``finish_hook_cmd`` now (drivers that stop their own backend); nothing when
        ``run_command`` is False (an earlier profiled step)."""
        if self._enable and run_command:
            self._finish_hook()

    def _finish_hook(self) -> None:
        if getattr(self._prof, "_finish", None) is None:
            if field(self.config, "finish_hook_cmd"):
                from rlprof.runtime.finish_hook import say

                say(self.rank, "not run on this rank (rank not selected by finish_hook_ranks/finish_hook_all_ranks)")
            return
        self._prof.run_finish_hook()

    def step(self) -> None:
        """One mini-batch of the update ended: the next iteration of the innermost sampled region
        begins. Free when nothing is sampled."""
        if not (self._enable and self._this_rank):
            return
        target = self
        if self._prof.current_step is None:  # the inner TrainingWorker's profiler: advance the started one of this rank
            target = next((p for p in reversed(_process().in_step()) if p.rank == self.rank), None)
            if target is None:
                return
        target._prof.next_iteration()

    def closing(self) -> bool:
        """Told ``stop()``, with the close still to run (a replica closes after answering)."""
        return False

    def finalize(self) -> list[dict[str, Any]]:
        """End this process's run (also happens at exit): backends write, the manifest closes."""
        try:
            return self._prof.finalize()
        finally:
            self._sync_live()

    # ------------------------------------------------------------------ annotate

    @classmethod
    def annotate(cls, message: str | None = None, color: str | None = None, domain: str | None = None,
                 category: str | None = None, **kwargs_outer: Any) -> Callable:
        """Decorate a worker method (the worker holds its profiler in ``self.profiler``).

        The range is named ``message or role or func.__name__`` (verl's rule). A name that starts
        with a role (``ref_compute_log_prob``) is that role's region; any other (``train_batch``,
        ``generate``) is a region of the worker's own role — so a critic TrainingWorker's
        ``train_batch`` is ``critic_train_batch``. ``scheduled=True`` marks the region whose
        iterations ``step()`` advances: only it is sampled by ``tool_config.<tool>.schedule``; the
        role's other regions are captured whole, as in verl. ``color``/``domain``/``category`` are the backends' business
        (NVTX/mstx colours): accepted and not used by rlprof's ranges.

        When a selected backend reads the model (``reads_module``: precision_debugger), each entry
        hands the region the module verl's worker holds for its role
        (:func:`rlprof.integrations.verl.models.worker_module`; None when nothing resolves).

        Cost when nothing is profiled: one attribute check; the role and stage are resolved at
        decoration and the region once per profiler.
        """

        def decorator(func: Callable) -> Callable:
            name = str(message or kwargs_outer.get("role") or func.__name__)
            named_role, stage = _split(name)
            key = (name, bool(kwargs_outer.get("scheduled", False)))

            @functools.wraps(func)
            def wrapper(self_instance, *args, **kwargs):
                try:
                    live = self_instance.profiler._rlprof_live
                except AttributeError:  # no profiler, or verl's own
                    return func(self_instance, *args, **kwargs)
                if live is not True:
                    return func(self_instance, *args, **kwargs)
                profiler = self_instance.profiler
                region = profiler._regions.get(key)
                if region is None:
                    region = profiler._region(key, named_role, stage, name)
                if profiler._reads_module:  # a selected backend reads the model: verl's worker holds it
                    region.module = worker_module(self_instance, region.role)
                with region:
                    return func(self_instance, *args, **kwargs)

            return wrapper

        return decorator

    def _region(self, key: Any, named_role: str | None, stage: str | None, name: str):
        """The cached rlprof region for an annotation on this profiler (first call only)."""
        if named_role in self.roles:
            role = named_role
        else:  # no role in the name, or a role this worker does not host: a stage of its own role
            role, stage = self.role, name
        scheduled = key[1]
        # verl samples only the scheduled stage (the update loop); the role's other stages stay whole
        region = self._regions[key] = self._prof.role(role, stage) if scheduled else self._prof.unsampled_role(role, stage)
        backends = self._prof.backends
        self._reads_module = backends is not None and backends.reads_module
        return region


def _finalize_process(run_id: str, how: str, rank: int | None = None) -> bool:
    """Finalize this process's profiling of ``run_id`` (of ``rank`` only, when given: the key of its
    process session): every profiler of it, so the backends write and the manifest says
    ``finalized``; then the finish hooks that were due. With ``how == LAST`` (the trainer's last
    profiled step) nothing happens while one of them is still inside its step (a colocated worker
    group the trainer stops next): False, try again. Also called by the run's watcher thread."""
    def mine(p: DistProfiler) -> bool:
        return p._prof.run.run_id == run_id and (rank is None or p.rank == rank)

    process = _process()
    with process.ending:
        if how == run_signals.LAST and any(mine(p) for p in process.in_step()):
            return False
        for profiler in [p for p in process.live() if mine(p)]:
            profiler.finalize()
        if not any(p._prof.run.run_id == run_id for p in process.live()):
            run_signals.mark_finalized(run_id)
        due = [p for p in process.hooks_due if mine(p)]
        for profiler in due:
            process.hooks_due.remove(profiler)
    for profiler in due:  # outside the lock: a slow upload must not hold up the watcher
        profiler._finish_hook()
    return True


def _covering(rank: int, config: Any) -> int:
    """The smallest world holding ``rank`` and every rank the section names."""
    ranks = list(field(config, "ranks", None) or [])
    return max([rank + 1] + [int(r) + 1 for r in ranks if isinstance(r, int)])


def _split(name: str) -> tuple[str | None, str | None]:
    """``"actor_update"`` → ``("actor", "update")``; ``"actor"`` → ``("actor", None)``;
    ``"train_batch"`` → ``(None, "train_batch")``."""
    from rlprof.config.schema import ROLES

    for role in ROLES:
        if name == role:
            return role, None
        if name.startswith(role + "_"):
            return role, name[len(role) + 1:]
    return None, name


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
    _closing: "asyncio.Task | concurrent.futures.Future | None" = None
    """The step's close (the backend stops and writes its capture), pending after ``stop_profile``
    answered (:meth:`stop`): a task on the server's event loop, or the close handed to the server's
    generating thread (``stop(executor=...)``); the next :meth:`start` or :meth:`finalize` waits for it."""

    def __init__(self, *args: Any, engine: str | None = None, **kwargs: Any):
        self.engine = engine
        """The engine adapter's name when an inference engine generates for this replica (its own
        profiler captures; no backend runs here), else None (generation runs in this process)."""
        super().__init__(*args, **kwargs)

    def _world(self, rank: int, config: Any, kwargs: Mapping[str, Any]) -> int:
        """No replica is told how many replicas there are (``WORLD_SIZE`` counts GPU ranks): at least
        as many as that and the replica ranks named, so none of them is outside."""
        known = int(kwargs.get("world_size") or os.environ.get("WORLD_SIZE") or 0)
        return max(known, _covering(rank, config))

    def _backends(self, config: Any) -> Any:
        """An engine stands in for the rollout backend (no torch.profiler here); a tool no engine stands in
        for (nsys) captures nothing in a replica, and says why: only the region is timed. Generation in
        this process (no engine) with torch or npu: the real backends."""
        from rlprof.integrations.engines.replica import engine_backends, engine_captures

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
        if self._rlprof_live and self._generating is None:
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
        * elsewhere it closes at once."""
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
            _process().due(self)  # runs once, when the replica's profiling is finalized

    def _closed_first(self, step: int | None = None, why: str = "the next generate call") -> None:
        """Run a close still pending (:meth:`stop`) now, on this thread when it is the loop's (the close
        has not begun: the loop runs one thing at a time), else on the loop, waited for (bounded). The
        wait is a ``profiling_wait`` record: profiling's cost, not the generate call's."""
        if not self.closing():
            self._closing = None
            return
        closing = self._closing
        import time

        from rlprof.integrations.loops import waitable_from_here

        began = time.time_ns()
        if isinstance(closing, concurrent.futures.Future):  # on the server's generating thread (FIFO: never this one)
            try:
                closing.result(FINALIZE_WAIT_S)
            except Exception:  # still running after the wait, or it raised (logged): the session's finalize closes what is open
                pass
            self._closing = None
        elif not waitable_from_here(closing):
            closing.cancel()
            self._closing = None
            self._close()
        else:
            try:
                asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(closing), FINALIZE_WAIT_S),
                                                 closing.get_loop()).result(FINALIZE_WAIT_S + 5.0)
            except Exception:  # the loop stopped or is stuck: the session's finalize closes what is open
                pass
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
        from rlprof.integrations.engines.replica import engine_captures

        if not engine_captures(self._prof.config):  # no engine profiler for this tool: start() and stop() time the region
            return None
        if self._engine is None:
            try:
                from rlprof.integrations.engines.replica import EngineReplica

                self._engine = EngineReplica(replica_rank=self.rank, num_replicas=self._world, engine=self.engine,
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
        from rlprof.integrations.engines.replica import engine_captures

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
        _process().due(self)

    def closing(self) -> bool:
        return self._closing is not None and not self._closing.done()

    def finalize(self) -> list[dict[str, Any]]:
        self._closed_first(why="the end of the run")
        if self._engine is not None:
            self._engine.finalize()
        return super().finalize()


FINALIZE_WAIT_S = 120.0
"""How long the end of the run waits, from another thread, for a replica's capture still closing."""


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
