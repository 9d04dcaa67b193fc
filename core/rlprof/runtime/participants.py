"""Who takes part in a process session: a Profiler seen through :class:`Participant`, joining it, and why one may not.

Colocated Profilers of one process (same run id and rank) share one session
(:class:`~rlprof.runtime.session.ProcessSession`); each must agree with it on tools, steps, mode and
save_path, else it stays idle (:class:`Disagreement`, warned once and recorded). The session holds its
Profilers weakly, so a Profiler dropped without ``finalize()`` leaves it.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import replace
from typing import Any, Callable, Mapping

from rlprof.errors import ConfigError
from rlprof.manifest import process_record
from rlprof.notices import say_once

log = logging.getLogger("rlprof")


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

class Membership:
    """The participants of a :class:`~rlprof.runtime.session.ProcessSession`: joining a Profiler (agreeing with the
    session, its tool configs validated, its ``process`` record written), and saying why one may not. A part of
    the session's class: it uses the session's ``lock``, ``plan``, ``run``, ``backends``, ``manifest``,
    ``environment`` and ``splits``, and owns ``_members`` (Profiler -> :class:`Participant`)."""

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


def _shown(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], bool):
        runs, every = value
        return "the steps the caller profiles" if every else (
            "steps " + ", ".join("-".join(map(str, (r[0], r[-1]))) if len(r) > 1 else str(r[0]) for r in runs) if runs else "no steps")
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)
