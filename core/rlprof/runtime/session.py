"""The process session: what every Profiler of one process shares, and how decisions become hook calls.

verl's colocated workers put several roles in one process (the critic in the actor's process), and
may build one Profiler per worker class. Profilers created in one process with the same run id and
rank are *participants* of one :class:`ProcessSession`:

* one instance per backend (so one torch.profiler session at a time: two at once crash torch's
  trace export), one capture state machine (:mod:`rlprof.runtime.capture_machine`), one manifest file;
* a step's capture opens at the first participant's ``start_step(N)`` and closes after the last
  participant that started N called ``step_boundary()``; every participant's regions are ranges in it;
* backends' ``finalize`` runs once, when the last participant finalizes (or at exit);
* each participant keeps its own roles, tool configs and ``process`` record; their configs must
  agree on tools, steps, mode and save_path. A Profiler that disagrees with the live session of its
  process (a verl worker rebuilt with another tool, a notebook, a role whose own ``profiler.tool``
  differs) never raises: it warns once, naming both configs, is recorded as a ``warning`` record of
  kind ``colocated`` in the session's manifest, and stays idle. It cannot profile beside the session:
  two torch.profiler sessions in one process crash torch's trace export, and a second manifest for
  the same rank and process would split one process's story in two.
* a session ends when its last Profiler finalizes, or when every Profiler of it was garbage-collected
  without finalizing (the session holds its Profilers weakly): the next Profiler of that run and rank
  then finalizes what the old one left open and starts a new session, and at exit rlprof does the same.

Locking: the session owns its lock and takes it in every public method (``enter``, ``exit``,
``join_step``, ``leave_step``, the iteration methods, ``finalize``): it guards the session's own state
(machine, manifest, backends, participants), which several Profilers share, so no caller can forget
it. The lock is re-entrant (leaving a step exits the regions still open). A Profiler's own lock
guards only its own fields and is always taken before this one.

A participant is a Profiler seen through :class:`Participant`: its public ``plan``, ``run``,
``config`` and ``stages``, and the two callbacks it hands over at :func:`join` (its regions go idle;
a step's captures are written), all held weakly. The session never touches a Profiler's private state.

The session also turns the machine's :class:`~rlprof.runtime.capture_state.Action` objects into calls of the typed
backend facade (:class:`rlprof.runtime.registry.Backends`), releases a backend that raised (the closing calls
for what it had open, then its ``finalize``, recorded as a ``cleanup``), lists artifacts and keeps
the timing records (``step``, ``region``), buffered per step and written at its end.

Its parts: this module (the session: its steps, regions and iterations, its end), who takes part
(:mod:`rlprof.runtime.participants`) and what its backends produce, as records (:mod:`rlprof.runtime.session_records`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any, Callable, Mapping

from rlprof.context import Capture
from rlprof.layout import capture_directory, process_tag
from rlprof.manifest import ManifestWriter, error_record, step_record, wait_record
from rlprof.notices import say_once
from rlprof.runtime.budget import CaptureBudget, Refusal
from rlprof.runtime.capture_machine import CaptureMachine
from rlprof.runtime.capture_state import CaptureStateError, OpenRegion
from rlprof.runtime.participants import Disagreement, Membership, Participant
from rlprof.runtime.session_records import SessionRecords

log = logging.getLogger("rlprof")

_sessions: dict[tuple[str, int, int], "ProcessSession"] = {}
"""(run id, rank, pid) -> its session: an index to find a session by, not the answer to "has it
ended" (:attr:`ProcessSession.finished` owns that; an ended session is delisted just after, outside
its lock). Read it through :func:`_open_session`."""
_sessions_lock = threading.Lock()
_new_region = object.__new__
PLAIN_STEPS_BUFFERED = 64
"""Unprofiled steps' timing records written in one go at most this many steps apart."""


def join(participant: Participant, instances: Mapping[str, Any] | None = None
         ) -> tuple["ProcessSession | None", dict[str, dict[str, Mapping[str, Any]]]]:
    """The session ``participant`` takes part in: the open one of its process with the same run id and
    rank, else a new one (with ``instances`` as backends instead of entry points, for tests of the
    core); and the participant's validated tool configs (selected role -> backend -> tool_config).
    ``(None, {})`` when it disagrees with the open session: it stays idle (warned and recorded).

    :raises ConfigError: a backend rejected a tool config.
    :raises BackendError: a selected backend cannot be loaded or registered (a new session only)."""
    prof = participant.profiler
    key = (prof.run.run_id, prof.run.rank, os.getpid())
    with _sessions_lock:
        previous = _open_session(key)
    if previous is not None:
        previous.finalize("collected")  # only does something when all its Profilers were collected unfinalized
    with _sessions_lock:
        session = _open_session(key)
        created = session is None
        if created:
            session = ProcessSession(prof, instances)
        try:
            tool_configs = session.add(participant)
        except Disagreement as exc:
            session.disagreed(prof, exc)
            return None, {}
        except BaseException:
            if created:
                session.backends.close()
            raise
        if created:
            _sessions[key] = session
            from rlprof.runtime import exits

            exits.register(session)  # finalizes it at exit if every Profiler of it was collected unfinalized
    return session, tool_configs


def _open_session(key: tuple[str, int, int]) -> "ProcessSession | None":
    """The session of ``key`` that has not ended, or None (under ``_sessions_lock``)."""
    session = _sessions.get(key)
    return session if session is not None and not session.finished else None


class ProcessSession(Membership, SessionRecords):
    """Backends, capture machine, manifest and timings of one process (see the module docstring)."""

    clock_ns: Callable[[], int] = time.time_ns
    """The clock of the step and region timing records (wall time in ns, as the manifest's other
    times). A class attribute so a test can give every session a fake clock that a slow backend
    advances, instead of sleeping and bounding real time."""

    def __init__(self, first: Any, instances: Mapping[str, Any] | None):
        from rlprof.runtime.registry import Backends

        self.key = (first.run.run_id, first.run.rank, os.getpid())
        self.plan = first.plan
        """The first participant's plan: tools, mode and runs of steps (every participant agrees)."""
        self.run = first.run
        """What every context carries; ``roles`` is the union of the participants' roles."""
        self.config = first.config
        self.lock = threading.RLock()
        self._members: "weakref.WeakKeyDictionary[Any, Participant]" = weakref.WeakKeyDictionary()
        """Profiler -> its :class:`Participant` (what to call back), in joining order; weak, so a Profiler
        dropped without ``finalize()`` leaves the session (see :meth:`finalize`)."""
        self.in_step: "weakref.WeakSet[Any]" = weakref.WeakSet()
        """Profilers that started the profiled step in progress and have not ended it: the owner of
        "who holds the shared step open" (the last one out ends it); the step itself is the machine's."""
        self.artifacts: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.environment: dict[str, list[str]] = {}
        self.profiled_steps: list[int] = []
        """The profiled steps ended so far (history for ``finalize``, not the step in progress)."""
        self.finished = False
        """The session ended (backends finalized, manifest closed): the one owner of that fact."""
        self._primary: Mapping[str, Mapping[str, Any]] = {}
        """Tool configs of step-level calls: the first participant's first selected role's."""
        self._step_start_ns = 0
        self._closed: list[OpenRegion] = []
        self._plain: tuple[int, int] | None = None
        """The unprofiled step in progress and when it began (two clock reads per unprofiled step)."""
        self._plain_steps: list[tuple[int, int, int]] = []
        """Unprofiled steps not yet written, ``(step, start_ns, end_ns)``: one ``unprofiled_steps`` record
        with the next step's timing records, or every :data:`PLAIN_STEPS_BUFFERED` steps (one line for many
        steps: a record per step cost more than the step's own bookkeeping)."""
        self._sized: list[tuple[str, dict[str, Any]]] = []
        """``capture`` records of the captures closed in the step, written with its timing records."""
        self._held: list[tuple[str, dict[str, Any]]] | None = None
        """While a step's captures close (:meth:`_end_step`): their artifact records, written with the step's
        timing records in one append (one write and flush a capture fewer, bench/bench_torch_overhead.py)."""
        self._implicit: set[str] = set()
        """Regions that mark iterations with ``next_iteration()`` (their iteration 0 begins at entry)."""
        self._unmarked: set[str] = set()
        self._readers: frozenset[str] = frozenset()
        """The session's backends that read their own traces (``trace_reader``): only their files are analysed."""
        self.splits: Any = None
        """The :class:`~rlprof.runtime.split_analyser.SplitAnalyser` of this process's captured traces, when a
        participant's roles are timed (``global_profiler.step_metrics``): their split goes to the step metrics."""
        self.unplanned: dict[int, str] = {}
        """Step -> why it is captured though no plan named it (:meth:`add_unplanned`); captures of other steps
        are ``planned``."""
        run = self.run
        self.manifest = ManifestWriter(
            run.run_dir / "manifest" / f"{process_tag(run.rank, run.host, run.pid)}.jsonl",
            {"run": run.run_id, "rank": run.rank, "host": run.host, "pid": run.pid}, root=run.run_dir,
        )
        self.budget = CaptureBudget(self.config.global_.capture_budget_mb, self.config.global_.run_budget_gb,
                                    run.run_dir, run.host, exact=self.config.capture_budget_given)
        """Each capture's size, and which captures the budgets leave out (:mod:`rlprof.runtime.budget`)."""
        self.backends = Backends(self.plan.tools, rank=run.rank, on_error=self._hook_failed, instances=instances)
        self.backends.run = run
        self.backends.on_result = self._collect
        self.backends.on_timeout = self._timed_out
        self.backends.on_failed = self._release
        self.backends.contain = True
        self.backends.start_watchdog()
        self.machine = CaptureMachine(discrete=self.plan.discrete, run_of=self.plan.run_of,
                                      make_capture=self._make_capture, hooks=self.backends)

    # ------------------------------------------------------------------ steps

    def join_step(self, prof: Any, step: int) -> frozenset:
        """``prof`` begins ``step`` (it ended its previous one itself); the roles of ``prof`` it profiles
        (they go live), empty when it profiles none: the step is not profiled, or the budgets left every
        capture out (each left out is a ``skip`` record)."""
        with self.lock:
            if self.in_step and self.machine.step != step:
                log.warning("rlprof: colocated Profilers of rank %d disagree on the step (%s began while %s is open); "
                            "ending step %s for all of them", self.run.rank, step, self.machine.step, self.machine.step)
                for other in list(self.in_step):
                    self.leave_step(other)
            planned = prof.plan.is_profiled(step)
            live = frozenset(prof.plan.selected_roles) if planned or step in self.unplanned else frozenset()
            if live:
                live = self._within_budget(step, live)
            profiled = bool(live)
            if not self.in_step:
                self._guarded(self.machine.start_step, step, profiled)
                self._plain = None if profiled else (step, self.clock_ns())
                if profiled:
                    self._step_start_ns = self.clock_ns()  # after the capture opened: opening is not the step's time
            if profiled:
                self.in_step.add(prof)
            return live

    def add_unplanned(self, steps: tuple[int, ...], reason: str) -> None:
        """Capture ``steps`` for ``reason`` (:meth:`rlprof.runtime.profiler.Profiler.capture`): the first reason
        given for a step stays (colocated Profilers are told the same)."""
        with self.lock:
            for step in steps:
                self.unplanned.setdefault(step, reason)

    def _within_budget(self, step: int, roles: frozenset) -> frozenset:
        """Of ``roles``, those the budgets still let capture at ``step``; a ``skip`` record per backend for
        the others. End-to-end, one capture holds every role: a role left out leaves the whole step out."""
        began = self.clock_ns()
        refused = self.budget.refused(tuple(sorted(roles)))
        if self.budget.waited:  # a closed capture's trace was still being written: profiling's cost
            self.manifest.write("profiling_wait", **wait_record("budget", began, self.clock_ns(), step=step,
                                                                reason="the last capture's size, for capture_budget_mb"))
        if not refused:
            return roles
        if not self.plan.discrete:
            first = next(iter(refused.values()))
            refused = dict.fromkeys(roles, first)
        by_reason: dict[Refusal, list[str]] = {}
        for role, refusal in refused.items():
            by_reason.setdefault(refusal, []).append(role)
        self.manifest.write_many([
            ("skip", {"backend": backend, "hook": None, "step": step, "steps": [step], "roles": sorted(names),
                      "region": None, "capture": None, **refusal.fields()})
            for refusal, names in by_reason.items() for backend in self.plan.tools])
        for refusal, names in by_reason.items():
            say_once(f"budget: {self.run.run_id} {self.run.rank} {refusal.budget} {sorted(names)}", log,
                     "rlprof: rank %d: %s: %s; their captures are skipped from step %d on, training goes on",
                     self.run.rank, ", ".join(sorted(names)), refusal.reason(), step)
        return roles - refused.keys()

    def leave_step(self, prof: Any) -> None:
        """``prof`` ends its step: its regions still open are exited and it goes idle; the last one
        out ends the step."""
        with self.lock:
            if prof not in self.in_step:
                if self._plain is not None:
                    self._end_plain_step()
                return
            for region in list(reversed(self.machine.stack)):
                if region.owner is prof and region in self.machine.stack:
                    log.warning("rlprof: step %s ended inside region %s; closing it", self.machine.step, region.name)
                    self.exit(region, None)
            self._members[prof].went_idle()
            self.in_step.discard(prof)
            if not self.in_step:
                self._end_step()

    def _end_plain_step(self) -> None:
        """An unprofiled step ended: its wall time, so the report can put profiled steps beside it."""
        (step, start_ns), self._plain = self._plain, None
        self._plain_steps.append((step, start_ns, self.clock_ns()))
        if len(self._plain_steps) >= PLAIN_STEPS_BUFFERED:
            self._flush_regions()

    def _end_step(self) -> None:
        step = self.machine.step
        end_ns = self.clock_ns()  # before the capture closes: exporting a trace is not the step's time
        self._held = []
        try:
            self._guarded(self.machine.end_step)
        finally:
            held, self._held = self._held, None
        if step is None:
            if held:
                self.manifest.write_many(held)
            return
        closed_ns = self.clock_ns()  # the step's captures are written: [end_ns, closed_ns] is profiling's own time
        self.profiled_steps.append(step)
        self._flush_regions(*held, ("step", step_record(step, self._step_start_ns, end_ns, closed_ns)))
        for participant in list(self._members.values()):
            participant.step_written(step)  # after the backends wrote the step's captures

    # ------------------------------------------------------------------ regions and iterations

    def enter(self, prof: Any, role: str, name: str, schedule: Any, configs: Any, module: Any = None) -> OpenRegion:
        """``prof``'s region ``name`` of ``role`` begins (``schedule``/``configs``: the role's, cached by the
        caller; ``module``: the model the region runs, or None)."""
        with self.lock:
            region = _new_region(OpenRegion)  # OpenRegion(role, name, schedule, prof), without a Python-level call
            region.role, region.name, region.schedule, region.owner = role, name, schedule, prof
            if module is not None:
                region.module = module
            region.configs = configs if configs is not None else self._primary
            try:
                self.machine.enter(region)
                if schedule is not None and name in self._implicit:
                    self.machine.iteration_begins()
            except CaptureStateError as exc:
                self._machine_failed(exc)
            region.start_ns = self.clock_ns()  # after its capture opened (discrete): the region's own time only
            return region

    def exit(self, region: OpenRegion, error: BaseException | None) -> None:
        with self.lock:
            stack = self.machine.stack
            if stack and stack[-1] is region:
                inner = ()
            elif region in stack:
                inner = stack[stack.index(region) + 1:]
            else:
                return
            region.end_ns = end_ns = self.clock_ns()  # before its capture closes and its trace is written
            self._guarded(self.machine.exit, region, error)
            region.closed_ns = self.clock_ns()  # after the capture it closed (discrete) was written
            self._closed.append(region)
            region.owner = region.module = None  # closed: its buffered timing record keeps neither its Profiler nor its model alive
            if inner or region.schedule is not None:
                self._closed_also(inner, region, end_ns)

    def _closed_also(self, inner: Any, region: OpenRegion, end_ns: int) -> None:
        """The rarer bookkeeping of an exit: regions closed with it (they were still open inside it),
        and the warning for a sampled region that marked no iterations."""
        self._closed[-1:-1] = inner  # innermost first, before the region itself
        for each in (*inner, region):
            each.end_ns = end_ns
            if each.schedule is not None and each.marked == 0 and not each.in_iteration and each.name not in self._unmarked:
                self._unmarked.add(each.name)
                log.warning(
                    "rlprof: region %s has a sampling schedule but marked no iterations, so nothing of it was "
                    "captured; wrap each micro-batch/decode step in `with prof.iteration():`", each.name)

    def iteration_begins(self) -> None:
        with self.lock:
            self._guarded(self.machine.iteration_begins)

    def iteration_ends(self, error: BaseException | None = None) -> None:
        with self.lock:
            self._guarded(self.machine.iteration_ends, error)

    def next_iteration(self) -> None:
        """End the iteration in progress of the innermost sampled region and begin the next one."""
        with self.lock:
            region = self.machine.innermost_sampled()
            if region is None:
                return
            if region.name not in self._implicit:
                self._implicit.add(region.name)
                if not region.in_iteration and region.iteration == 0:
                    # First use of this style in this region: its iteration 0 began at entry, learnt only now.
                    self._guarded(self.machine.iteration_begins)
            self._guarded(self.machine.iteration_ends)
            self._guarded(self.machine.iteration_begins)

    # ------------------------------------------------------------------ the end

    def leave(self, prof: Any, reason: str) -> None:
        """``prof`` leaves (its ``finalize()``); the last participant out ends the session."""
        with self.lock:
            if prof in self.in_step:
                self.leave_step(prof)
            self._members.pop(prof, None)
            last = not self._members and not self.finished
            if last:
                self._end(reason)
            self.manifest.write("finalized", reason=reason, roles=list(prof.run.roles), artifacts=len(self.artifacts),
                                errors=len(self.errors))
            if last:
                self.manifest.close()
        if last:
            self._delist()

    def finalize(self, reason: str) -> None:
        """End a session whose Profilers were all garbage-collected without ``finalize()`` (called by the
        next Profiler of the same run and rank, and at process exit): close what they left open and let
        the backends write it. Does nothing while a Profiler of it is alive, or once it has ended."""
        with self.lock:
            if self.finished or self._members:
                return
            log.warning("rlprof: every Profiler of run %s rank %d was dropped without finalize(); finalizing what "
                        "they captured now (%s)", self.run.run_id, self.run.rank, reason)
            self.in_step.clear()
            self._end(reason)
            self.manifest.write("finalized", reason=reason, roles=list(self.run.roles), artifacts=len(self.artifacts),
                                errors=len(self.errors))
            self.manifest.close()
        self._delist()

    def _end(self, reason: str) -> None:
        """Close everything open and finalize the backends, once (under the lock)."""
        self._guarded(self.machine.leave)
        self.backends.finalize(reason, tuple(self.profiled_steps), self.config.global_.relocate_results)
        self._flush_regions()
        self.backends.close()
        self.budget.close()
        self.finished = True

    def _delist(self) -> None:
        # outside the session's lock: join() takes the two locks in the other order
        with _sessions_lock:
            if _sessions.get(self.key) is self:
                del _sessions[self.key]
        from rlprof.layout import release_held_dirs

        release_held_dirs()  # no directory descriptor of rlprof outlives the session (the conformance suite checks)
        from rlprof.runtime import exits

        exits.unregister(self)


    def _make_capture(self, capture_id: str, steps: tuple[int, ...], regions: tuple[str, ...]) -> Capture:
        run = self.run
        return Capture(capture_id=capture_id, steps=steps, regions=regions,
                       directory=capture_directory(run.run_dir, capture_id, run.rank, run.host, run.pid))

    def _guarded(self, operation, *args: Any) -> None:
        """Run a machine operation; a bug in the machine is logged and recorded, never raised into training.
        A capture it closed is measured (:meth:`_capture_closed`)."""
        opened = self.machine.open_capture
        try:
            operation(*args)
        except CaptureStateError as exc:
            self._machine_failed(exc)
        if opened is not None and self.machine.open_capture is not opened:
            self._capture_closed(opened)

    def _machine_failed(self, exc: CaptureStateError) -> None:
        log.error("rlprof: %s (a bug in rlprof; please report it). Training goes on.", exc)
        self._record_error(error_record(None, None, "core", str(exc)))
