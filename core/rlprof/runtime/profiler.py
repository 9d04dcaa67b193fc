"""When the core calls the hooks: the worker-side :class:`Profiler`, the lifecycle facade.

Use it the way a trainer's worker runs a step::

    prof = rlprof.Profiler(config, rank=rank, world_size=world, roles=("actor", "ref"))
    for step in range(1, n + 1):
        prof.start_step(step)
        with prof.role("ref", "compute_log_prob"):
            ...
        with prof.role("actor", "update"):
            for micro_batch in batches:
                with prof.iteration():          # only matters when the role has a schedule
                    ...
        prof.step_boundary()
    prof.finalize()

``role`` also decorates functions (``@prof.role("actor", "update")``). Everything about *what* is
captured was decided by :func:`rlprof.runtime.plan.resolve_plan`; *when* a capture opens and closes is decided
by the capture state machine (:mod:`rlprof.runtime.capture_machine`); the process session (:mod:`rlprof.runtime.session`)
turns those decisions into isolated hook calls, shares backends between colocated Profilers and keeps
the manifest; :mod:`rlprof.runtime.exits` finalizes at process exit. This module is the public surface.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rlprof.config.schema import ProfilerConfig, load_config
from rlprof.context import RunInfo
from rlprof.layout import hostname
from rlprof.manifest import settled_artifacts
from rlprof.runtime.plan import ProcessPlan, resolve_plan
from rlprof.runtime.profiler_records import FrameworkRecords
from rlprof.runtime.regions import IdleRegion, Iteration, ProfiledRegion, TimedRegion
from rlprof.runtime.run_id import run_id_for
from rlprof.runtime.step_timings import now_ns as _now

log = logging.getLogger("rlprof")
_NOTHING: frozenset = frozenset()
FINALIZE_STEPS = ("_stop_listening", "_close_window", "_leave_session", "_go_idle", "_send_last_timings",
                  "_wait_finish_hook")
"""What :meth:`Profiler.finalize` does, in order: each a method taking ``(reason, wait_for_analysis)``."""


class Profiler(FrameworkRecords):
    """The profiler of one process (one rank, the roles it hosts).

    :param config: a YAML path, mapping, OmegaConf ``DictConfig`` or :class:`ProfilerConfig`. A loaded
        :class:`ProfilerConfig` (what an integration read once where the config entered its process) is
        taken as it is, never read again.
    :param rank: global rank of this process; ``world_size`` the number of ranks.
    :param roles: the roles this process hosts, e.g. ``("actor", "rollout", "ref")``.
    :param stages: optional ``{role: [stage, ...]}`` run every step; lets the plan count capture
        windows exactly (nsys ``repeat-shutdown:N``).
    :param replica_rank: rollout replica index (agent-loop mode), with ``num_replicas``.
    :param run_id: shared by every rank of a run (the Ray controller passes one); default:
        :func:`rlprof.runtime.run_id.run_id_for` (env ``RLPROF_RUN_ID`` or a new id).
    :param overrides: dotted ``key=value`` overrides applied on top of ``config``.
    :param backends: ``{name: instance}`` to use instead of entry points: tests of the core, and a rollout
        replica, whose engine stands in for the rollout backend (``rlprof.integrations.engines.replica.engine_backends``).

    Colocated roles: Profilers created in one process with the same ``run_id`` and ``rank`` share one
    process session (one instance per backend, one capture per step, one manifest file); each keeps
    its own roles. See docs/captures.md.
    """

    def __init__(
        self,
        config: Any = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        roles: Sequence[str] = ("actor",),
        stages: Mapping[str, Sequence[str]] | None = None,
        replica_rank: int | None = None,
        num_replicas: int | None = None,
        run_id: str | None = None,
        overrides: Iterable[str] = (),
        backends: Mapping[str, Any] | None = None,
    ):
        self.config: ProfilerConfig = load_config(config, overrides)
        self.plan: ProcessPlan = resolve_plan(
            self.config, rank=rank, world_size=world_size, roles=tuple(roles),
            replica_rank=replica_rank, num_replicas=num_replicas,
        )
        self.stages = stages
        self._live: frozenset = _NOTHING
        self._regions: dict[str, dict[str | None, ProfiledRegion]] = {}
        """role -> stage -> its region object (nested: cheaper to look up than a (role, stage) key)."""
        self._iteration_cm = Iteration(self)
        self._step: int | None = None
        """The step this Profiler began and has not ended (profiled or not): its own, since colocated
        Profilers each call start_step/step_boundary; the process session owns the shared step. The one
        owner of "which step is this caller in": every integration asks :attr:`current_step`."""
        self._starts = 0
        """How many times :meth:`start_step` was called: the step of a caller never told its step."""
        self._finalized = False
        """The one owner of "is this Profiler finalized" (read it through :attr:`finalized`)."""
        self._lock = threading.RLock()
        """Guards this Profiler's own state (``_step``, ``_finalized``, live roles) against a finalize
        from the exit handler's thread; taken before the session's lock, never inside it."""
        self.tool_configs: Mapping[str, Mapping[str, Mapping[str, Any]]] = {}
        """Selected role -> backend -> its validated tool_config (checked by the session's backends)."""
        g = self.config.global_
        run_id = run_id_for(run_id)
        self.run = RunInfo(
            run_id=run_id,
            rank=rank,
            world_size=world_size,
            host=hostname(),
            pid=os.getpid(),
            run_dir=Path(g.save_path).absolute() / run_id,
            roles=tuple(roles),
            replica_rank=replica_rank,
            peak_tflops=g.peak_tflops,
        )
        from rlprof.runtime.finish_hook import FinishHook

        self._finish = FinishHook.for_process(self.config, self.plan, self.run)
        self._tokens = None
        """Its :class:`~rlprof.runtime.tokens.TokenCounter`, from the first ``record_tokens``."""
        self._times = None
        """This Profiler's region timings not sent yet (:mod:`rlprof.runtime.step_timings`), when some hosted
        role is timed (``plan.timed``); read it as :attr:`timings`."""
        self._began_ns = 0
        """When the step in progress began (its window, sent with the timings)."""
        if self.plan.timed:
            self._times = self._new_times()
        self._session = None
        self._backends_given = backends
        self._decider = None
        """This process's :class:`~rlprof.runtime.unplanned.Decider` (an armed run without a driver), made at the
        first step: a driver (the Ray controller, verl's trainer) sets :attr:`driven` before that."""
        self.driven = bool(self.config.global_.caller_steps)
        """A driver decides the steps captured unplanned and tells this Profiler (:meth:`capture`)."""
        if self.plan.active:
            from rlprof.runtime.checking import require_usable_save_path

            require_usable_save_path(self.config)  # a ConfigError naming global_profiler.save_path, before any write
            from rlprof.runtime.participants import Participant
            from rlprof.runtime.session import join

            self._session, self.tool_configs = join(
                Participant(self, went_idle=self._went_idle, step_written=self._step_written), backends)
        if self._session is not None or self._finish is not None or self._times is not None:
            from rlprof.runtime import exits

            exits.register(self)

    def _new_times(self):
        from rlprof.layout import process_tag
        from rlprof.runtime.process_book import ProcessSink
        from rlprof.runtime.step_timings import RegionTimes, register

        run = self.run
        tag = process_tag(run.rank, run.host, run.pid)
        return register(RegionTimes(run.run_id, tag, run.rank,
                                    ProcessSink(run, self.plan.tools, tag, self.config.global_.request_records_mb)))

    # ------------------------------------------------------------------ public API

    @property
    def active(self) -> bool:
        """This process profiles at all (some hosted role selected, a tool and steps set)."""
        return self.plan.active

    @property
    def current_step(self) -> int | None:
        """The step this Profiler began (:meth:`start_step`) and has not ended, profiled or not; None
        between steps and once finalized. Integrations ask this instead of keeping their own flag."""
        return self._step

    @property
    def finalized(self) -> bool:
        """:meth:`finalize` ran (by the caller, at exit, or by an integration's end-of-run watcher)."""
        return self._finalized

    @property
    def open_capture_id(self) -> str | None:
        """The id of the capture open now in this process's session (the capture machine's record),
        or None: what a participant asks instead of mirroring the machine (a rollout replica)."""
        session = self._session
        opened = session.machine.open_capture if session is not None else None
        return opened.capture.capture_id if opened is not None else None

    @property
    def backends(self):
        """The process session's :class:`~rlprof.runtime.registry.Backends` (shared by colocated Profilers),
        or None when this process does not profile (backends are not even imported then)."""
        return self._session.backends if self._session is not None else None

    @property
    def environment(self) -> dict[str, list[str]]:
        """Backend -> what it reported missing on this machine (``check_environment``), shared by
        colocated Profilers; empty when this process does not profile."""
        return self._session.environment if self._session is not None else {}

    @property
    def manifest_path(self) -> Path | None:
        """The process manifest this Profiler's records go to (shared by colocated Profilers), or None
        when this process does not profile (the Ray glue sends what it gains to the controller)."""
        return self._session.manifest.path if self._session is not None else None

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        """Artifact records of the process session so far (colocated Profilers share them); a file listed
        while written in the background and again once written is one record (:func:`rlprof.manifest.settled_artifacts`)."""
        if self._session is None:
            return []
        records = self._session.artifacts
        return settled_artifacts(records) if any("state" in r for r in records) else records

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Contained failures of the process session so far (the manifest's ``error`` records)."""
        return self._session.errors if self._session is not None else []

    @property
    def timings(self):
        """This Profiler's :class:`~rlprof.runtime.step_timings.RegionTimes` (its regions' timings on every
        step, on their way to the step metrics), or None when no hosted role is timed. An integration sets
        its ``sink`` before the first region (a Ray worker's: the run's mailbox)."""
        return self._times

    def role(self, role: str, stage: str | None = None, module: Any = None) -> ProfiledRegion:
        """A region of ``role`` (``stage`` names what it does: ``update``, ``compute_log_prob``,
        ``generate``): use as ``with prof.role(...)`` or ``@prof.role(...)``. One object per (role,
        stage), whose class switches between live and idle with the step; when the role is not
        profiled, ``with prof.role(...)`` costs two dict lookups (bench/bench_core.py).

        ``module``: the model the region runs (a ``torch.nn.Module``), for backends that hook into it
        (``precision_debugger`` dumps its layers); they read it as ``ctx.module``. Given once, it stays
        the region's until another is given."""
        if module is None:  # the idle path: as cheap as before regions carried a model
            try:
                return self._regions[role][stage]
            except KeyError:
                return self._new_region(role, stage, stage, sampled=True)
        region = self.role(role, stage)
        region.module = module
        return region

    def _new_region(self, role: str, stage: str | None, key: Any, *, sampled: bool) -> ProfiledRegion:
        """The cached region object of ``role`` under ``key``, live, timed or idle as the role is now."""
        region = self._region_class(role)(self, role, stage, sampled=sampled)
        self._regions.setdefault(role, {})[key] = region
        return region

    def unsampled_role(self, role: str, stage: str | None = None, module: Any = None) -> ProfiledRegion:
        """Like :meth:`role`, but the role's ``schedule`` does not sample this region: it is captured
        whole. For callers that schedule one stage of a role only (verl samples the update loop,
        ``annotate(scheduled=True)``, and keeps the role's log-prob stages whole)."""
        key = (stage, "unsampled")
        try:
            region = self._regions[role][key]
        except KeyError:
            region = self._new_region(role, stage, key, sampled=False)
        if module is not None:
            region.module = module
        return region

    def iteration(self) -> Iteration:
        """Mark one iteration (micro-batch, forward pass, decode step) of the innermost region:
        ``with prof.iteration(): ...``. Drives the role's ``schedule``; free when there is none."""
        return self._iteration_cm

    def next_iteration(self) -> None:
        """torch.profiler ``step()`` style marking, for callers that cannot wrap iterations in
        ``with prof.iteration()`` (verl's ``DistProfiler.step()``): ends the current iteration of the
        innermost sampled region and begins the next. The first iteration begins at region entry
        (from the second time the region runs; the first time, it is learnt at the first call)."""
        session = self._session
        if session is not None and self._live:
            session.next_iteration()

    def start_step(self, step: int | None = None) -> None:
        """A training step begins. Call on every step; only profiled ones make hook calls. ``step``
        left out: the count of ``start_step`` calls so far, this one included (callers that are never
        told the step, such as a rollout replica's server; the one place steps are numbered that way)."""
        with self._lock:
            self._starts += 1
            if step is None:
                step = self._starts
            if self._step is not None:
                log.warning("rlprof: start_step(%s) before step_boundary() of step %s; closing step %s first",
                            step, self._step, self._step)
                self.step_boundary()
            if self._finalized:
                return
            self._step = step
            self._began_ns = _now()
            if self._decider is not False:
                self._unplanned_step(step)
            live = self._session.join_step(self, step) if self._session is not None else None
            if live:
                self._set_live(live)

    def capture(self, steps: Iterable[int], reason: str) -> bool:
        """Capture ``steps`` though no plan named them, for ``reason`` (``requested: <id>``, ``triggered: ...``):
        a driver's :class:`~rlprof.runtime.unplanned.Decider` chose them. Backends are loaded at the first such
        step of a process that captured nothing yet. False when this Profiler captures nothing on request
        (the run is not armed, no hosted role is selected on this rank, it is finalized). Never raises."""
        with self._lock:
            if self._finalized or not (self.plan.active or self.plan.armed):
                return False
            if self._session is None:
                try:
                    self._join_unplanned()
                except Exception as exc:
                    log.error("rlprof: rank %d cannot capture %s (%s: %s); training goes on", self.run.rank, reason,
                              type(exc).__name__, exc)
                    return False
                if self._session is None:
                    return False
            self._session.add_unplanned(tuple(steps), reason)
            return True

    def _join_unplanned(self) -> None:
        """Join the process session with the plan's armed roles selected (:meth:`ProcessPlan.unplanned`)."""
        from rlprof.runtime import exits
        from rlprof.runtime.checking import require_usable_save_path
        from rlprof.runtime.participants import Participant
        from rlprof.runtime.session import join

        require_usable_save_path(self.config)
        self.plan = self.plan.unplanned()
        self._session, self.tool_configs = join(
            Participant(self, went_idle=self._went_idle, step_written=self._step_written), self._backends_given)
        exits.register(self)

    def _unplanned_step(self, step: int) -> None:
        """Ask this process's decider whether ``step`` is captured unplanned (a plain Profiler of an armed run)."""
        decider = self._decider
        if decider is None:
            from rlprof.runtime.plan import armed, armed_mode

            if self.driven or not armed(self.config):
                self._decider = False
                return
            from rlprof.runtime.unplanned import process_decider

            decider = self._decider = process_decider(self.run, self.config.global_.trigger, tools=self.plan.tools,
                                                      mode=armed_mode(self.config), planned=self.config.global_.steps or ())
        reason = decider.decide(step)
        if reason is not None:
            self.capture((step,), reason)

    def step_boundary(self) -> None:
        """The current training step ends."""
        with self._lock:
            step, self._step = self._step, None
            if step is None or self._finalized:
                return
            if self._decider:
                self._decider.step_ended(step, (_now() - self._began_ns) / 1e9, captured=bool(self._live))
            if self._times is not None:
                self._times.windows.append((step, self._began_ns, _now(), bool(self._live)))
            if self._session is None:
                self._step_written(step)
            else:
                self._session.leave_step(self)  # a profiled step: the session calls _went_idle, _step_written

    def run_finish_hook(self) -> None:
        """Start ``finish_hook_cmd`` now (callers that decide the steps themselves, such as verl's
        trainer passing ``run_command=True`` on its last profiled step). Runs at most once."""
        if self._finish is not None:
            self._finish.start()

    def finalize(self, reason: str = "end", *, wait_for_analysis: bool = True) -> list[dict[str, Any]]:
        """End the run for this Profiler: close what is open, let backends write (when it is the last
        Profiler of its process session), finish the manifest. Idempotent; also runs at interpreter
        exit and on SIGTERM. Returns the artifact records.

        The steps, in order (:data:`FINALIZE_STEPS`): stop listening for unplanned captures, close the window of
        the step it ends inside, leave the process session (the last one out ends it: backends write, the
        manifest closes), let its regions go idle, send its last timings (the last traces' analysis is handed
        on, never waited for: :meth:`rlprof.runtime.split_analyser.SplitAnalyser.hand_off`), wait for the finish
        hook. ``wait_for_analysis`` is kept for callers that pass it (a Ray actor passed False); it changes nothing now."""
        with self._lock:
            if self._finalized:
                return self.artifacts
            self._finalized = True
            for step in FINALIZE_STEPS:
                getattr(self, step)(reason, wait_for_analysis)
            return self.artifacts

    def _stop_listening(self, reason: str, wait: bool) -> None:
        from rlprof.runtime import exits

        exits.unregister(self)
        if self._decider:
            self._decider.stop()

    def _close_window(self, reason: str, wait: bool) -> None:
        if self._times is not None and self._step is not None:  # the step it ends inside: its window so far
            self._times.windows.append((self._step, self._began_ns, _now(), bool(self._live)))

    def _leave_session(self, reason: str, wait: bool) -> None:
        if self._session is not None:
            self._session.leave(self, reason)

    def _go_idle(self, reason: str, wait: bool) -> None:
        self._step = None
        self._set_live(_NOTHING)  # finalized: timed regions go idle too, unless a driver's steps go on

    def _send_last_timings(self, reason: str, wait: bool) -> None:
        if self._times is None:
            return
        final = not self._times.outlives
        splits = self._session.splits if self._session is not None else None
        # the process's last traces still being analysed for the step metrics are handed on, never waited for
        # (issue 49): the split is finished outside it (rlprof.analysis.late_split) and written to the step
        # metrics file after the run; the hand-off goes with this last batch
        if splits is not None and self._session.finished:
            splits.hand_off()
        self._times.flush(final=final)

    def _wait_finish_hook(self, reason: str, wait: bool) -> None:
        if self._finish is not None:
            self._finish.wait()

    # ------------------------------------------------------------------ what the process session calls back
    #
    # Handed to the session as this Profiler's Participant (rlprof.runtime.session): it calls them, under
    # its lock, when this Profiler's part in a profiled step ends and when that step's captures are written.

    def _went_idle(self) -> None:
        """This Profiler is out of the session's step (its step ended, or colocated Profilers disagreed
        on the step): its regions go idle."""
        self._set_live(_NOTHING)

    def _step_written(self, step: int) -> None:
        """The step's captures are written: the finish hook may start after the last profiled step."""
        if self._finish is not None and not self._finalized:
            self._finish.step_done(step)

    # ------------------------------------------------------------------ regions

    def _set_live(self, roles: frozenset) -> None:
        """Make every region of ``roles`` live and the others timed or idle. A region whose state changes forgets
        the entries it had open in the old one (a profiled step's: the session has closed them; a timed one's:
        its time is not the step's that began inside it)."""
        self._live = roles
        for stages in self._regions.values():
            for region in stages.values():
                state = self._region_class(region.role)
                if region.__class__ is not state or not roles:
                    region._open.clear()
                    region._started.clear()
                region.__class__ = state

    def _region_class(self, role: str) -> type:
        """Live while ``role`` is profiled now; else timed when the plan times it; else idle."""
        if role in self._live:
            return ProfiledRegion
        times = self._times
        timed = times is not None and role in self.plan.timed and (not self._finalized or times.outlives)
        return TimedRegion if timed else IdleRegion

