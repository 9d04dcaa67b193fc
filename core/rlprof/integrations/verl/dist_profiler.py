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

import functools
import logging
import os
import threading
import weakref
from typing import Any, Callable, Mapping

from rlprof.integrations.verl import global_keys, run_signals
from rlprof.integrations.verl import tokens
from rlprof.integrations.verl.models import worker_module
from rlprof.integrations.verl.sections import field, hosted_roles, rlprof_source
from rlprof.notices import say_once
from rlprof.runtime.run_id import in_ray

log = logging.getLogger("rlprof")

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
        whose close is still pending is not: finalizing runs that close first
        (:meth:`rlprof.integrations.verl.rollout_profiler.RolloutDistProfiler.finalize`)."""
        return [p for p in self.members() if p._prof.current_step is not None and not p.closing()]

    def due(self, profiler: "DistProfiler") -> None:
        """``profiler``'s finish hook runs when this process's profiling is finalized (once)."""
        if profiler not in self.hooks_due:
            self.hooks_due.append(profiler)


_PROCESS = _Process()


def process_profilers() -> _Process:
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

    _rlprof_enters = False
    """What ``annotate`` reads: :attr:`_rlprof_live`, or the Profiler times its roles on every step (the step
    metrics: its regions are entered, and timed, on unprofiled steps too). Written only by :meth:`_sync_live`."""

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

        world = self._world_size(rank, config, kwargs)
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
        self.world_size = world
        """How many ranks this profiler's role has (:meth:`_world_size`), as its Profiler was told."""
        self._prof = Profiler(cfg, rank=rank, world_size=world, roles=self.roles, run_id=shared_run_id(),
                              replica_rank=kwargs.get("replica_rank"), num_replicas=kwargs.get("num_replicas"),
                              backends=self._backends(cfg))
        self._send_timings()
        self._sync_live()
        process_profilers().add(self)
        if self._prof.plan.active:
            self._this_rank = self._this_rank or any(self._prof.plan.roles[r].selected for r in self.roles)
            run_id = self._prof.run.run_id
            run_signals.watch(run_id, functools.partial(_finalize_process, run_id), str(self._prof.run.run_dir))

    def _world_size(self, rank: int, config: Any, kwargs: Mapping[str, Any]) -> int:
        """The number of ranks: what the caller or the environment says (``world_size``, ``WORLD_SIZE``),
        so that ranks outside it are an error naming the key (``rlprof check`` says the same); when
        neither says it, as large as the ranks named."""
        known = int(kwargs.get("world_size") or os.environ.get("WORLD_SIZE") or 0)
        if known:
            return max(known, rank + 1)
        return covering_world(rank, config)

    def _backends(self, config: Any) -> Any:
        """The backends of this process's Profiler: None, the selected tools' entry points."""
        return None

    def _send_timings(self) -> None:
        """This worker's region timings of every step go to verl's trainer (the run's Ray mailbox:
        :mod:`rlprof.integrations.verl.step_metrics`)."""
        from rlprof.integrations.step_mailbox import send_to_driver

        send_to_driver(self._prof)

    def _sync_live(self) -> None:
        """Refresh the :attr:`_rlprof_live` and :attr:`_rlprof_enters` caches from the Profiler (their only writer)."""
        prof = self._prof
        self._rlprof_live = prof.active and prof.current_step is not None and not prof.finalized
        times = prof.timings
        self._rlprof_enters = self._rlprof_live or (times is not None and (not prof.finalized or times.outlives))

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
        if step is not None:  # a step the trainer's decider chose (rlprof capture, a trigger): why
            reason = run_signals.reason_of(self._prof.run.run_id, step)
            if reason is not None:
                self._prof.capture((int(step),), reason)
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
            process_profilers().due(self)
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
            target = next((p for p in reversed(process_profilers().in_step()) if p.rank == self.rank), None)
            if target is None:
                return
        target._prof.next_iteration()

    def closing(self) -> bool:
        """Told ``stop()``, with the close still to run (a replica closes after answering)."""
        return False

    def finalize(self) -> list[dict[str, Any]]:
        """End this process's run (also happens at exit): backends write, the manifest closes. A verl process in a
        Ray actor does not wait for its last traces' analysis: the actor ends when its owner does (verl's rollout
        replicas when the trainer's task returns), and one killed inside that wait never tells the run it
        finalized (the run's end then waits 30 s for it)."""
        try:
            return self._prof.finalize(wait_for_analysis=not in_ray())
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

        An actor, ref or critic stage's batch also says its tokens (:mod:`rlprof.integrations.verl.tokens`): the
        step's tokens/s and MFU of the region.

        Cost when nothing is profiled: one attribute check; the role and stage are resolved at
        decoration and the region once per profiler.
        """

        def decorator(func: Callable) -> Callable:
            name = str(message or kwargs_outer.get("role") or func.__name__)
            named_role, stage = _split(name)
            key = (name, bool(kwargs_outer.get("scheduled", False)))
            trains = tokens.counted(stage) if named_role else None  # its batch's tokens: the step's MFU

            @functools.wraps(func)
            def wrapper(self_instance, *args, **kwargs):
                try:
                    live = self_instance.profiler._rlprof_enters
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
                batch = tokens.before(args, kwargs) if trains is not None else None
                with region:
                    result = func(self_instance, *args, **kwargs)
                if batch is not None:
                    tokens.record(profiler._prof, self_instance, region, trains, batch)
                return result

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

    process = process_profilers()
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


def covering_world(rank: int, config: Any) -> int:
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
