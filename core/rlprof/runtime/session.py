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

The session also turns the machine's :class:`~rlprof.runtime.capture_machine.Action` objects into calls of the typed
backend facade (:class:`rlprof.runtime.registry.Backends`), releases a backend that raised (the closing calls
for what it had open, then its ``finalize``, recorded as a ``cleanup``), lists artifacts and keeps
the timing records (``step``, ``region``), buffered per step and written at its end.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from dataclasses import replace
from typing import Any, Callable, Mapping

from rlprof.runtime.budget import CaptureBudget, Refusal
from rlprof.runtime.capture_machine import CaptureMachine, CaptureStateError, OpenCapture, OpenRegion
from rlprof.context import Capture
from rlprof.errors import ConfigError
from rlprof.notices import say_once
from rlprof.layout import capture_directory, process_tag
from rlprof.manifest import (CaptureRecord, ManifestWriter, artifact_record, cleanup_fields, note_records, describe_error, error_record,
                             plain_steps_record, process_record, record_fields, region_record, step_record, wait_record)

log = logging.getLogger("rlprof")

_sessions: dict[tuple[str, int, int], "ProcessSession"] = {}
"""(run id, rank, pid) -> its session: an index to find a session by, not the answer to "has it
ended" (:attr:`ProcessSession.finished` owns that; an ended session is delisted just after, outside
its lock). Read it through :func:`_open_session`."""
_sessions_lock = threading.Lock()
_new_region = object.__new__
PLAIN_STEPS_BUFFERED = 64
"""Unprofiled steps' timing records written in one go at most this many steps apart."""


class Participant:
    """How the session sees one Profiler: the Profiler itself (read through its public ``plan``,
    ``run``, ``config``, ``stages``) and what the session calls back, under its lock. Everything is
    held weakly, so a Profiler nobody finalized can still be garbage-collected (its session then ends)."""

    __slots__ = ("_profiler", "_went_idle", "_step_written", "__weakref__")

    def __init__(self, profiler: Any, went_idle: Callable[[], None], step_written: Callable[[int], None]):
        self._profiler = weakref.ref(profiler)
        self._went_idle = weakref.WeakMethod(went_idle)
        """The profiler's part in the profiled step ended (its own step_boundary, or colocated Profilers
        disagreed on the step): its regions go idle."""
        self._step_written = weakref.WeakMethod(step_written)
        """A profiled step ended and the backends wrote its captures (the finish hook may start)."""

    @property
    def profiler(self) -> Any:
        return self._profiler()

    def went_idle(self) -> None:
        callback = self._went_idle()
        if callback is not None:
            callback()

    def step_written(self, step: int) -> None:
        callback = self._step_written()
        if callback is not None:
            callback(step)


class Disagreement(ConfigError):
    """A Profiler's config disagrees with the live session of its process (see the module docstring)."""


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


class ProcessSession:
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

    # ------------------------------------------------------------------ participants

    @property
    def participants(self) -> list[Any]:
        """The Profilers taking part now, in joining order."""
        return list(self._members)

    def add(self, participant: Participant) -> dict[str, dict[str, Mapping[str, Any]]]:
        """Join a Profiler: check it agrees with the session, validate its tool configs (returned),
        write its ``process`` record."""
        prof = participant.profiler
        with self.lock:
            if self._members:
                self._check_agrees(prof)
            tool_configs = self._validated_tool_configs(prof)
            if not self._members:
                self._primary = self.backends.primary = tool_configs.get(prof.plan.selected_roles[0], {})
                self._check_environment()
            self._members[prof] = participant
            roles = tuple(dict.fromkeys(r for p in self._members for r in p.run.roles))
            if roles != self.run.roles:
                self.run = self.backends.run = replace(self.run, roles=roles)
            self._analyse_for(prof, roles)
            self.manifest.write_record(process_record(prof, self.environment))
            return tool_configs

    def _analyse_for(self, prof: Any, roles: tuple[str, ...]) -> None:
        """A participant whose roles are timed: this process's traces are analysed for the step metrics, their
        split sent with its timings (:mod:`rlprof.runtime.split_analyser`)."""
        times = prof.timings
        if times is None:
            return
        if self.splits is None:
            from rlprof.runtime.split_analyser import SplitAnalyser

            self.splits = SplitAnalyser(roles)
            self._readers = frozenset(impl.backend for impl in self.backends.impls.get("trace_reader", ()))
        self.splits.roles = roles
        self.splits.add(times)

    def _check_agrees(self, prof: Any) -> None:
        first = next(iter(self._members))
        mine, theirs = first.plan, prof.plan
        checks = (
            ("global_profiler.tool", "tools", mine.tools, theirs.tools),
            ("global_profiler.steps", "profiled steps (steps, profile_continuous_steps)", (mine.runs, mine.every_step),
             (theirs.runs, theirs.every_step)),
            ("global_profiler.save_path", "save_path", first.run.run_dir, prof.run.run_dir),
            (None, "mode (tool_config.<tool>.discrete)", "discrete" if mine.discrete else "end-to-end",
             "discrete" if theirs.discrete else "end-to-end"),
        )
        for key, what, a, b in checks:
            if a != b:
                if key is None:
                    role = theirs.selected_roles[0]
                    key = f"{prof.config.roles[role].key_path}.tool_config.{theirs.tools[0]}.discrete"
                raise Disagreement(
                    f"{key}: colocated Profilers of run {self.run.run_id} rank {self.run.rank} disagree on the {what}: "
                    f"the one hosting {'+'.join(first.run.roles)} has {_shown(a)}, the one hosting "
                    f"{'+'.join(prof.run.roles)} has {_shown(b)}; allowed: the same value for every Profiler of one "
                    f"process (they share one capture per backend)", key=key)

    def disagreed(self, prof: Any, exc: Disagreement) -> None:
        """``prof`` disagrees with this session: say so once per process, record it, and let it stay idle."""
        message = (f"{exc}. The later Profiler stays idle (profiling goes on with the first one's config); finalize "
                   f"the first Profiler before building one with another config, or give them the same")
        run_id, rank, pid = self.key
        say_once(f"colocated: run {run_id} rank {rank} pid {pid}: {exc}", log, "rlprof: %s", message)
        with self.lock:
            self.manifest.write("warning", kind="colocated", key=exc.key, message=message,
                                roles=list(prof.run.roles))

    def _validated_tool_configs(self, prof: Any) -> dict[str, dict[str, Mapping[str, Any]]]:
        """``global_tool_config.<tool>`` on its own key path first, then each selected role's section."""
        backends = self.backends
        for tool in self.plan.tools:
            backends.validated_global_section(tool, prof.config)
        return {name: {b: backends.validated_tool_config(b, prof.config.roles[name]) for b in self.plan.tools}
                for name in prof.plan.selected_roles}

    def _check_environment(self) -> None:
        """Ask each backend what it lacks here (no CUDA, no CANN...): warn once, keep it for the
        ``process`` records. A check that raised is also an ``error`` record (kind ``environment``)."""
        for backend in self.plan.tools:
            problems = self.backends.check_environment(backend)
            if problems:
                self.environment[backend] = problems
            for problem in problems:
                log.warning("rlprof: backend %r on rank %d: %s", backend, self.run.rank, problem)

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

    # ------------------------------------------------------------------ dispatch

    def _release(self, backend: str) -> None:
        """Release a backend right after its first failure (the machine's state is the one of the call
        that failed): close what it had open, innermost first, then call its ``finalize`` once; record a
        ``cleanup``. A backend that failed in ``finalize`` itself was already finalized once."""
        backends = self.backends
        if backends.failed.get(backend) == "finalize":
            return
        errors_before = len(self.errors)
        closed = []
        for action in self.machine.release_actions():
            if action.hook == "stop_role":
                backends.stop_role(action.region, action.step, action.capture, action.closes, action.iterations,
                                   action.error, backend)
            else:
                backends.step_boundary(action.step, action.capture, action.closes, action.ends_step, backend)
            if action.closes and action.capture is not None:
                closed.append(action.capture.capture_id)
        finalize_errors = len(self.errors)
        backends.finalize("released", tuple(self.profiled_steps), self.config.global_.relocate_results, backend)
        finalized = len(self.errors) == finalize_errors
        problems = [e["error"] for e in self.errors[errors_before:]]
        log.warning("rlprof: backend %r released after it failed: closed %s, finalize %s", backend,
                    ", ".join(closed) or "nothing", "ran" if finalized else "raised")
        self.manifest.write("cleanup", **cleanup_fields(backend, closed, finalized, problems))

    def _collect(self, backend: str, hook: str, ctx: Any, result: Any) -> None:
        """List what a call produced; a result that is not a path (or list of paths) is an ``error``
        record of kind ``return``, never an exception in training."""
        produced = list(ctx._artifacts or ())
        if result is not None:
            paths = _paths(result)
            if paths is None:
                message = (f"{hook} returned {result!r} ({type(result).__name__}); a hook returns None, a path "
                           "(str or os.PathLike) or a list of paths")
                log.error("rlprof: backend %r on rank %d: %s", backend, self.run.rank, message)
                self._record_error(error_record(backend, hook, "return", message))
            else:
                produced.extend((p, "file", {}) for p in paths)
        selected = tuple(dict.fromkeys(r for p in self._members for r in p.plan.selected_roles)) or self.plan.selected_roles
        for path, kind, extra in produced:
            entry = artifact_record(backend, ctx, path, kind, extra, run_dir=self.run.run_dir,
                                    world_size=self.run.world_size, mode="discrete" if self.plan.discrete else "e2e",
                                    selected_roles=selected)
            self.artifacts.append(entry)
            if self._held is not None:
                self._held.append(("artifact", entry))
            else:
                self.manifest.write("artifact", **entry)
            self.budget.add_artifact(entry)
            if self.splits is not None and backend in self._readers:  # a backend that writes traces it reads
                self.splits.offer(path, entry)
        if ctx._notes:  # what the backend said (ctx.warn, ctx.skip)
            self.manifest.write_many(note_records(backend, hook, ctx, selected))

    def _hook_failed(self, backend: str, hook: str, exc: BaseException, kind: str) -> None:
        self._record_error(error_record(backend, hook, kind, describe_error(exc)))

    def _timed_out(self, backend: str, hook: str, rank: int, elapsed_s: float, stack: str) -> None:
        """The watchdog's report (from its own thread, while training waits for the hook): never takes the lock."""
        log.error("rlprof: backend %r has been running %s for %.1f s on rank %d (RLPROF_HOOK_TIMEOUT_S); training "
                  "waits for it. Its stack:\n%s", backend, hook, elapsed_s, rank, stack)
        self._record_error(error_record(backend, hook, "timeout", f"{hook} still running after {elapsed_s:.1f} s",
                                        elapsed_s=round(elapsed_s, 3), stack=stack))

    def record_error(self, source: str | None, hook: str | None, kind: str, error: str, **details: Any) -> None:
        """Record a contained failure that did not happen inside a hook call (a rollout engine that could
        not start its profiler, or died): an ``error`` record the report and the verdict show."""
        with self.lock:
            self._record_error(error_record(source, hook, kind, error, **details))

    def record_warning(self, source: str, message: str, **details: Any) -> None:
        """Record a warning about something rlprof drives outside the hooks (an engine setting it cannot
        honour): a ``warning`` record of kind ``backend``, shown by the report and the verdict."""
        with self.lock:
            self.manifest.write("warning", kind="backend", backend=source, message=message, **details)

    def record_wait(self, source: str, start_ns: int, end_ns: int, **details: Any) -> None:
        """Record a wait of training on profiling outside the hooks: a ``profiling_wait`` record."""
        with self.lock:
            self.manifest.write("profiling_wait", **wait_record(source, start_ns, end_ns, **details))

    def _record_error(self, entry: dict[str, Any]) -> None:
        self.errors.append(entry)
        self.manifest.write("error", **entry)

    def _flush_regions(self, *first: tuple[str, dict[str, Any]]) -> None:
        """Write the buffered timing records (after ``first``) in one go."""
        closed, self._closed = self._closed, []
        sized, self._sized = self._sized, []
        plain, self._plain_steps = self._plain_steps, []
        if plain:
            first = (("unprofiled_steps", plain_steps_record(plain)), *first)
        self.manifest.write_many([*first, *sized, *(("region", region_record(region)) for region in closed)])

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

    def _capture_closed(self, opened: OpenCapture) -> None:
        """A capture closed: the bytes its artifacts measured, as a ``capture`` record (step, roles, region,
        bytes), written with the step's timing records; the budget counts them."""
        capture = opened.capture
        if opened.region is not None:
            roles, region = (opened.region.role,), opened.region.name
        else:
            roles = tuple(dict.fromkeys(r for p in self._members for r in p.plan.selected_roles)) or self.plan.selected_roles
            region = None
        size = self.budget.closed(capture.capture_id, roles)
        step = capture.steps[0] if capture.steps else None
        record = CaptureRecord(capture=capture.capture_id, step=step, steps=list(capture.steps), roles=list(roles),
                               region=region, bytes=size, reason=self.unplanned.get(step, "planned"))
        self._sized.append((record.TYPE, record_fields(record)))

    def _machine_failed(self, exc: CaptureStateError) -> None:
        log.error("rlprof: %s (a bug in rlprof; please report it). Training goes on.", exc)
        self._record_error(error_record(None, None, "core", str(exc)))


def _paths(result: Any) -> list[Any] | None:
    """The paths a hook returned, or None when it returned something else."""
    if isinstance(result, (str, os.PathLike)):
        return [result]
    if isinstance(result, (list, tuple)) and all(isinstance(p, (str, os.PathLike)) for p in result):
        return list(result)
    return None


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], bool):
        runs, every = value
        return "the steps the caller profiles" if every else (
            "steps " + ", ".join("-".join(map(str, (r[0], r[-1]))) if len(r) > 1 else str(r[0]) for r in runs) if runs else "no steps")
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
