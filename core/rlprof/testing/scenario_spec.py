"""What a scripted run does and what it produced: :class:`Scenario` (the trainer's script), :class:`BackendRun`
(everything the run left for a test to assert on), and the failures a scenario scripts.

The player is :mod:`rlprof.testing.scenario` (:func:`~rlprof.testing.scenario.run_scenario`), which re-exports
these names.
"""

from __future__ import annotations

import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rlprof.roles import nest_profiler
from rlprof.runtime.registry import LIFECYCLE
from rlprof.testing.footprint import Footprint
from rlprof.testing.recorder import RecordingBackend

RECORDER = "rlprof_recorder"
"""The name the companion recorder runs under."""

RAY_BLOCKED_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGCHLD})
"""What Ray's actor threads block (``signal.pthread_sigmask``); a subprocess started there inherits it."""

STAGES = {"actor": "update", "rollout": "generate", "ref": "compute_log_prob", "critic": "update", "reward": "compute_score"}
"""The stage each role's region is named for, as in verl (``actor_update``, ``ref_compute_log_prob``)."""

BackendSpec = Any
"""A backend to test: an entry-point name (``"walltime"``: loaded the way the core loads it), a
backend class (instantiated once per run, as the core does), or an instance (reused as is)."""


class ScriptedFailure(RuntimeError):
    """The exception a scenario raises inside a region (``raise_in``): it must reach the trainer unchanged."""


class ScriptedHookFailure(RuntimeError):
    """What a scenario with ``fail_after`` raises right after the backend's own hook ran, as if the
    backend had raised it: the core must release the backend (close what it had open, finalize it)."""


@dataclass(frozen=True)
class Scenario:
    """What the scripted trainer does. Every field has a default; a test names what matters to it."""

    name: str = "custom"
    mode: str = "e2e"
    """``e2e`` (one capture per profiled step) or ``discrete`` (one capture per region)."""
    steps: tuple[int, ...] = (1, 2)
    """The profiled steps (``global_profiler.steps``)."""
    total_steps: int | None = None
    """How many steps the loop runs; default ``max(steps) + 1``, so an unprofiled step runs too."""
    roles: tuple[str, ...] = ("actor", "ref")
    """The roles this process hosts (all selected); each runs one region per step, in this order."""
    iterations: int = 2
    """Iterations (``prof.iteration()``) inside each region."""
    schedule: Mapping[str, int] | None = None
    """A sampling ``schedule`` for every role, e.g. ``{"wait": 1, "active": 1, "repeat": 2}``."""
    continuous: bool = False
    """``profile_continuous_steps``: consecutive profiled steps share one capture (e2e only)."""
    raise_in: str | None = None
    """A role or region name: its region raises :class:`ScriptedFailure` in the first profiled step."""
    raise_at_iteration: int | None = None
    """Raise inside this iteration of the region; None: after the region's last iteration."""
    after_raise: str = "continue"
    """``continue``: the trainer catches the exception and goes on; ``exit``: it stops and the
    process ends (the Profiler finalizes with reason ``exit``, with the step capture still open)."""
    tool_config: Mapping[str, Any] = field(default_factory=dict)
    """The backend's ``tool_config`` section (``discrete`` is set from ``mode``)."""
    nested: bool = False
    """Each role's region runs inside the previous role's (``ref_compute_log_prob`` inside
    ``actor_update``, after its iterations), as verl's annotated worker methods nest."""
    first_step: int = 1
    """The step the loop starts at: a later one is a run resumed from a checkpoint."""
    forget_boundary_at: int | None = None
    """The trainer never calls ``step_boundary()`` after this step (the next ``start_step`` must end it)."""
    colocated: bool = False
    """The first role lives on one Profiler, the others on a second Profiler of the same process, run id
    and rank (verl's colocated worker classes): they must share one capture per step."""
    fail_after: str | None = None
    """A lifecycle hook: the first time the core calls it, :class:`ScriptedHookFailure` is raised right
    after the backend's own implementation ran, as if the backend had raised; the core must release it."""
    blocked_signals: bool = False
    """Play the loop (Profilers, hooks, finalize) on a thread that blocks :data:`RAY_BLOCKED_SIGNALS`,
    as Ray's actor threads do: a backend that starts a subprocess and stops it by signal must unblock
    them in the child."""
    hook_timeout_s: float = 10.0
    """``RLPROF_HOOK_TIMEOUT_S`` for the run: a hook call that makes training wait longer is recorded
    as a ``timeout`` error, which fails the conformance suite (a real run would stall on it)."""
    region_s: float = 0.0
    """Each region lasts at least this long (its iterations repeat the work): a sampling profiler needs
    time to take samples. Set for every scenario by the kit's ``region_s`` setting."""

    def __post_init__(self) -> None:
        if self.mode not in ("e2e", "discrete"):
            raise ValueError(f"Scenario.mode: got {self.mode!r}; allowed: 'e2e', 'discrete'")
        if self.after_raise not in ("continue", "exit"):
            raise ValueError(f"Scenario.after_raise: got {self.after_raise!r}; allowed: 'continue', 'exit'")
        unknown = [r for r in self.roles if r not in STAGES]
        if unknown:
            raise ValueError(f"Scenario.roles: got {unknown[0]!r}; allowed: {', '.join(STAGES)}")
        if self.colocated and len(self.roles) < 2:
            raise ValueError("Scenario.colocated: needs at least two roles (one per Profiler)")
        if self.fail_after is not None and self.fail_after not in LIFECYCLE_HOOKS:
            raise ValueError(f"Scenario.fail_after: got {self.fail_after!r}; allowed: {', '.join(LIFECYCLE_HOOKS)}")

    @property
    def profilers(self) -> list[tuple[str, ...]]:
        """The roles of each Profiler the scripted process creates."""
        return [self.roles[:1], self.roles[1:]] if self.colocated else [self.roles]

    @property
    def last_step(self) -> int:
        return self.total_steps if self.total_steps is not None else max(self.steps) + 1

    def describe(self) -> str:
        """The scenario in plain words, for failure messages."""
        words = ["end-to-end" if self.mode == "e2e" else "discrete",
                 f"profiled steps {', '.join(map(str, self.steps))} of {self.last_step}",
                 f"roles {' + '.join(self.roles)} in one process", f"{self.iterations} iterations per region"]
        if self.continuous:
            words.append("continuous steps merged")
        if self.first_step != 1:
            words.append(f"training resumed at step {self.first_step}")
        if self.nested:
            words.append("each role's region nested inside the previous one's")
        if self.forget_boundary_at is not None:
            words.append(f"the trainer forgets step_boundary() after step {self.forget_boundary_at}")
        if self.colocated:
            words.append(f"{self.roles[0]} and {' + '.join(self.roles[1:])} on two Profilers sharing the process")
        if self.fail_after:
            words.append(f"the backend raises right after its first {self.fail_after} ran, and is released")
        if self.blocked_signals:
            words.append("hooks run on a thread blocking SIGINT, SIGTERM and SIGCHLD (as Ray's actor threads)")
        if self.region_s:
            words.append(f"each region lasts at least {self.region_s:g} s")
        if self.schedule:
            words.append("sampling schedule " + ", ".join(f"{k}={v}" for k, v in self.schedule.items()))
        if self.raise_in:
            where = f"iteration {self.raise_at_iteration}" if self.raise_at_iteration is not None else "its end"
            then = "the trainer catches it and goes on" if self.after_raise == "continue" else "the process then exits"
            words.append(f"region {self.raise_in} raises at {where} in step {self.steps[0]}, {then}")
        return "; ".join(words)

    def config(self, backend: str, save_path: Path) -> dict[str, Any]:
        """The verl-style configuration that makes the core do what this scenario says."""
        tool_config = {backend: {**self.tool_config, "discrete": self.mode == "discrete"}}
        section: dict[str, Any] = {"enable": True, "all_ranks": True, "tool_config": tool_config}
        if self.schedule:
            section["schedule"] = dict(self.schedule)
        config: dict[str, Any] = {"global_profiler": {
            "tool": [backend, RECORDER], "steps": list(self.steps), "save_path": str(save_path),
            "profile_continuous_steps": self.continuous,
        }}
        for role in self.roles:
            nest_profiler(config, role, section)
        return config

    def raises_in(self, role: str, step: int) -> bool:
        region = f"{role}_{STAGES[role]}"
        return self.raise_in in (role, region) and step == min(s for s in self.steps if s >= self.first_step)


LIFECYCLE_HOOKS = LIFECYCLE
"""The lifecycle hooks of the spec (:data:`rlprof.runtime.registry.LIFECYCLE`), the kit's older name."""


@dataclass
class SecondFinalize:
    """What calling the backend's ``finalize`` hook again, after the run, did."""

    error: BaseException | None = None
    new_paths: list[str] = field(default_factory=list)
    """Paths it returned or added that the first finalize had not listed."""
    changed: list[str] = field(default_factory=list)
    """Files in the run directory it created, changed or removed."""
    profiler_repeat_differs: bool = False
    """``Profiler.finalize()`` called again returned other artifacts than the first time (a core bug)."""


@dataclass
class BackendRun:
    """Everything one scripted run produced. Paths in :attr:`records` are relative to :attr:`run_dir`."""

    name: str
    """The name the backend ran under (``global_profiler.tool``)."""
    scenario: Scenario
    profiler: Any
    backend: Any
    """The backend instance the Profiler called."""
    recorder: RecordingBackend
    run_dir: Path
    save_path: Path
    workdir: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    """Every manifest record of the run (process, artifact, error, finalized)."""
    log: list[logging.LogRecord] = field(default_factory=list)
    """Warnings and errors the core logged during the run (a failing hook's traceback is here)."""
    raised: ScriptedFailure | None = None
    """The exception the scenario raised in a region, if it did."""
    caught: BaseException | None = None
    """What reached the trainer's ``except`` around that region (must be :attr:`raised` itself)."""
    open_after: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    """``{moment: (backend's open captures, core's open captures)}``, taken after the region raised,
    after each step and after finalize; only when the backend has ``open_captures()``."""
    second_finalize: SecondFinalize | None = None
    footprint: Footprint | None = None
    profilers: list[Any] = field(default_factory=list)
    """Every Profiler of the scripted process (two with ``colocated``)."""
    injected: "InjectedFailure | None" = None
    """With ``fail_after``: when the scripted failure was raised, and what the backend held then."""

    @property
    def artifacts(self) -> list[dict[str, Any]]:
        """The manifest's artifact records of the backend under test."""
        return [r for r in self.records if r.get("type") == "artifact" and r.get("backend") == self.name]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Hook failures of the backend under test, as the manifest recorded them (the scenario's own
        injected :class:`ScriptedHookFailure` left out)."""
        return [r for r in self.records if r.get("type") == "error" and r.get("backend") == self.name
                and ScriptedHookFailure.__name__ not in str(r.get("error"))]

    @property
    def skipped(self) -> list[dict[str, Any]]:
        """``skip`` records of the backend under test: captures it said it wrote nothing for, and why."""
        return [r for r in self.records if r.get("type") == "skip" and r.get("backend") == self.name]

    @property
    def warnings(self) -> list[dict[str, Any]]:
        """``warning`` records of the backend under test (its ``ctx.warn``)."""
        return [r for r in self.records if r.get("type") == "warning" and r.get("backend") == self.name]

    @property
    def cleanups(self) -> list[dict[str, Any]]:
        """``cleanup`` records of the backend under test: the core released it after it raised."""
        return [r for r in self.records if r.get("type") == "cleanup" and r.get("backend") == self.name]

    def artifact_paths(self) -> list[Path]:
        return [self.run_dir / r["path"] for r in self.artifacts]

    def output_dirs(self) -> list[Path]:
        """The backend's directories under the run: ``<capture>/<process>/<name>/`` and ``_process/<process>/<name>/``."""
        return sorted(p for p in self.run_dir.glob(f"*/*/{self.name}") if p.is_dir())

    def files_written(self) -> list[Path]:
        """Every file under the backend's output directories."""
        return [path for directory in self.output_dirs() for path in sorted(directory.rglob("*")) if path.is_file()]

    def sequence(self) -> list[str]:
        """The hook calls the core made, compactly (see :meth:`RecordingBackend.sequence`)."""
        return self.recorder.sequence()


@dataclass
class InjectedFailure:
    """The state of a ``fail_after`` scenario's scripted failure."""

    hook: str
    raised: bool = False
    noted: bool = False
    captures: set[str] = field(default_factory=set)
    """Capture ids the backend had been told to open up to the failure (its own to close and write)."""
