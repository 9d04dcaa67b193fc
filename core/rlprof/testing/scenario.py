"""A scripted training loop that drives one backend through a real :class:`~rlprof.Profiler`.

This is what the pytest fixture ``rlprof_run`` and the conformance suite run. A :class:`Scenario`
says what the trainer does (mode, steps, roles, sampling schedule, where a region raises);
:func:`run_scenario` plays it in a sandbox and returns a :class:`BackendRun` holding everything a
test asserts on: the Profiler, the manifest records, the hook errors, the exception that reached
the trainer, the backend's open captures at each point, and the run's :class:`Footprint`.

The sandbox: the loop runs with a fresh working directory and a fresh temporary directory
(``tempfile`` and ``TMPDIR``), and ``save_path`` is a fresh directory, so anything the backend
writes outside ``ctx.output_dir()`` shows up somewhere a test can see it.

Beside the backend under test the loop runs a :class:`RecordingBackend` (named
``rlprof_recorder``, writing nothing) that tells which capture windows the core opened and closed;
it says so with ``ctx.skip`` on each capture, so ``rlprof report`` on a kit's run does not count the
recorder's captures as missing.

Real runs differ from a plain test in where the hooks run: Ray runs actor methods on threads that
block SIGINT, SIGTERM and SIGCHLD, and a child process inherits that mask. ``Scenario(blocked_signals=True)``
plays the whole loop on such a thread (:data:`RAY_BLOCKED_SIGNALS`), as a Ray worker does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from rlprof.roles import nest_profiler
from rlprof.context import finalize_context
from rlprof.layout import safe_name
from rlprof.manifest import read_records
from rlprof.runtime.plan import primary_role
from rlprof.runtime.registry import ARGUMENTS, HOOKS, LIFECYCLE
from rlprof.testing.footprint import Footprint
from rlprof.testing.recorder import RecordingBackend, hook_function

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


def backend_factory(backend: BackendSpec, name: str | None = None) -> tuple[str, Callable[[], Any]]:
    """``(name, make)`` for a backend given by entry-point name, class or instance."""
    if isinstance(backend, str):
        from rlprof.runtime.registry import load_backend

        return backend, lambda: load_backend(backend)
    label = name or getattr(backend, "name", None)
    if not isinstance(label, str):
        label = safe_name((backend if isinstance(backend, type) else type(backend)).__name__.lower())
    if isinstance(backend, type):
        return label, backend
    return label, lambda: backend


def run_scenario(backend: BackendSpec, scenario: Scenario, workdir: os.PathLike | str, *,
                 name: str | None = None, work: Callable[[], Any] | None = None, strict: bool | None = None,
                 module: Any = None) -> BackendRun:
    """Play ``scenario`` with ``backend`` in a sandbox under ``workdir`` (created; must be fresh).

    ``work`` runs inside every iteration (default: a little pure-Python arithmetic); pass e.g. a
    small torch matmul for a backend that needs operators to record. ``strict`` sets
    ``RLPROF_STRICT`` for the run (None: leave the environment as it is); the conformance suite runs
    with ``strict=False`` so a raising hook is reported with its traceback instead of ending the run.
    ``module``: the model every region runs (``prof.role(..., module=module)``, the backends'
    ``ctx.module``), for a backend that hooks into it; ``work`` should then call it.
    """
    from rlprof.runtime.profiler import Profiler

    name, make = backend_factory(backend, name)
    workdir = Path(workdir).absolute()
    cwd, tmp, save_path = workdir / "cwd", workdir / "tmp", workdir / "profile"
    for directory in (cwd, tmp, save_path):
        directory.mkdir(parents=True, exist_ok=True)
    run_id = safe_name(f"conformance-{scenario.name}")
    run_dir = save_path / run_id
    plugin, recorder = make(), RecordingBackend(write_captures=False)
    footprint = Footprint(run_dir=run_dir, allowed=[tmp], watched={
        "the working directory": cwd, "the temporary directory": tmp, "save_path, outside the run directory": save_path,
    })
    run = BackendRun(name=name, scenario=scenario, profiler=None, backend=plugin, recorder=recorder,
                     run_dir=run_dir, save_path=save_path, workdir=workdir, footprint=footprint)
    registered = plugin
    if scenario.fail_after is not None:
        run.injected = InjectedFailure(scenario.fail_after)
        registered = _failing_after(plugin, run.injected, recorder)
    work = work or _default_work
    if scenario.region_s > 0:
        work = _lasting(work, scenario.region_s / max(scenario.iterations, 1))

    def loop() -> None:
        try:
            for roles in scenario.profilers:
                run.profilers.append(Profiler(scenario.config(name, save_path), roles=roles, run_id=run_id,
                                              backends={name: registered, RECORDER: recorder}))
            run.profiler = run.profilers[0]
            _play(run.profilers, run, work, module)
        except BaseException:
            for each in run.profilers:  # the loop itself failed: leave no exit or SIGTERM handler behind
                each.finalize()
            raise
        for each in run.profilers:  # once: the repeat below checks what a second finalize does
            each.finalize()

    with _sandbox(cwd, tmp, strict, scenario.hook_timeout_s), _logged(run.log), footprint:
        if scenario.blocked_signals:
            _on_blocking_thread(loop, RAY_BLOCKED_SIGNALS)
        else:
            loop()
        prof = run.profiler
        _note_open(run, "after finalize")
        footprint.settle()
        first = list(prof.artifacts)
        run.second_finalize = _finalize_again(run)
        run.second_finalize.profiler_repeat_differs = prof.finalize() != first
    run.records = list(read_records([run_dir])) if run_dir.exists() else []
    return run


@dataclass
class InjectedFailure:
    """The state of a ``fail_after`` scenario's scripted failure."""

    hook: str
    raised: bool = False
    noted: bool = False
    captures: set[str] = field(default_factory=set)
    """Capture ids the backend had been told to open up to the failure (its own to close and write)."""


def _failing_after(plugin: Any, injected: InjectedFailure, recorder: RecordingBackend) -> Any:
    """A stand-in registered in place of ``plugin``: each hook calls the backend's own implementation;
    the first call of ``injected.hook`` then raises :class:`ScriptedHookFailure` (after listing what
    the call returned with ``ctx.add_artifact``, so nothing the backend wrote goes unlisted). Built from
    the spec, by argument names: a hook added to the spec later is stood in for like any other."""
    from rlprof.hookspecs import OUTSIDE_A_RUN
    from rlprof.runtime.registry import plugin_manager

    pm = plugin_manager()
    pm.register(plugin)
    stand_in = type(f"FailingAfter_{type(plugin).__name__}", (), {})()
    for hook in (h for h in HOOKS if h not in OUTSIDE_A_RUN):  # a run calls only these (never in a stand-in)
        impls = getattr(pm.hook, hook).get_hookimpls()
        if impls:
            setattr(stand_in, hook, _delegate(hook, impls[0].function, tuple(impls[0].argnames), injected, recorder))
    for name in ("rlprof_contract", "reads_module", "open_captures"):  # what the core and the kit read besides hooks
        if hasattr(plugin, name):
            setattr(stand_in, name, getattr(plugin, name))
    return stand_in


def _delegate(hook: str, function: Callable, argnames: tuple[str, ...], injected: InjectedFailure,
              recorder: RecordingBackend) -> Callable:
    """The stand-in's ``hook``: takes the spec's arguments, hands the backend's implementation the ones it
    names, and raises right after the first call of the injected hook."""
    names = ARGUMENTS[hook]

    def call(*arguments: Any) -> Any:
        given = dict(zip(names, arguments))
        ctx = given.get("ctx")
        if not injected.raised and getattr(ctx, "opens_capture", False):
            injected.captures.add(ctx.capture.capture_id)
        result = function(*(given[name] for name in argnames))
        if hook == injected.hook and not injected.raised:
            injected.raised = True
            injected.captures.update(recorder.open_captures())
            for path in _returned_paths(result):
                ctx.add_artifact(path)
            raise ScriptedHookFailure(f"scripted failure right after the backend's {hook} ran (step "
                                      f"{getattr(ctx, 'step', None)})")
        return result

    return hook_function(hook, call)


def _returned_paths(result: Any) -> list[Any]:
    if result is None:
        return []
    if isinstance(result, (str, os.PathLike)):
        return [result]
    return list(result)


def _play(profilers: list, run: BackendRun, work: Callable[[], Any], module: Any = None) -> None:
    scenario = run.scenario
    owner = {role: prof for prof, roles in zip(profilers, scenario.profilers) for role in roles}
    for step in range(scenario.first_step, scenario.last_step + 1):
        for prof in profilers:
            prof.start_step(step)
            _note_release(run)
        if scenario.nested:
            _nested(owner, list(scenario.roles), scenario, work, run, module)
        for role in () if scenario.nested else scenario.roles:
            failure = ScriptedFailure(f"scripted failure in {role}_{STAGES[role]} at step {step}") \
                if scenario.raises_in(role, step) and run.raised is None else None
            try:
                _region(owner[role], role, scenario, work, failure, run, module)
            except BaseException as exc:  # the trainer's own handler
                if failure is None:
                    raise
                run.raised, run.caught = failure, exc
                _note_open(run, f"after {role}_{STAGES[role]} raised in step {step}")
                if scenario.after_raise == "exit":
                    for prof in profilers:
                        prof.finalize(reason="exit")
                    return
            _note_release(run)
        if step == scenario.forget_boundary_at:
            continue
        for prof in profilers:
            prof.step_boundary()
            _note_release(run)
        if profilers[0].plan.is_profiled(step):
            _note_open(run, f"after step {step}")


def _nested(owner: dict, roles: list[str], scenario: Scenario, work: Callable[[], Any], run: BackendRun,
            module: Any = None) -> None:
    """``roles[0]``'s region, with the next role's region inside it after its iterations, and so on."""
    role = roles[0]
    with owner[role].role(role, STAGES[role], module=module):
        for _ in range(scenario.iterations):
            with owner[role].iteration():
                work()
        if len(roles) > 1:
            _nested(owner, roles[1:], scenario, work, run, module)
    _note_release(run)


def _region(prof, role: str, scenario: Scenario, work: Callable[[], Any], failure: ScriptedFailure | None,
            run: BackendRun | None = None, module: Any = None) -> None:
    with prof.role(role, STAGES[role], module=module):
        for index in range(scenario.iterations):
            with prof.iteration():
                work()
                if failure is not None and scenario.raise_at_iteration == index:
                    raise failure
            if run is not None:
                _note_release(run)
        if failure is not None:
            raise failure


def _note_release(run: BackendRun) -> None:
    """Once the scripted failure was raised (and the core released the backend): what it still holds."""
    injected = run.injected
    if injected is None or not injected.raised or injected.noted:
        return
    injected.noted = True
    report = getattr(run.backend, "open_captures", None)
    if callable(report):
        try:
            held = sorted(str(c) for c in report())
        except Exception as exc:
            held = [f"<open_captures() raised {type(exc).__name__}: {exc}>"]
        run.open_after[f"after the core released it (its {injected.hook} raised)"] = (held, [])


def _default_work() -> None:
    sum(i * i for i in range(2000))


def _lasting(work: Callable[[], Any], seconds: float) -> Callable[[], None]:
    """``work`` repeated until ``seconds`` passed (at least once)."""
    def repeated() -> None:
        until = time.perf_counter() + seconds
        work()
        while time.perf_counter() < until:
            work()

    return repeated


def _on_blocking_thread(loop: Callable[[], None], blocked: frozenset) -> None:
    """Run ``loop`` on a new thread that blocks ``blocked`` first (as Ray's actor threads do); what it
    raises is raised here."""
    failure: list[BaseException] = []

    def body() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            loop()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=body, name="rlprof-kit-blocked-signals")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _note_open(run: BackendRun, moment: str) -> None:
    report = getattr(run.backend, "open_captures", None)
    if callable(report):
        try:
            held = sorted(str(c) for c in report())
        except Exception as exc:
            held = [f"<open_captures() raised {type(exc).__name__}: {exc}>"]
        run.open_after[moment] = (held, sorted(run.recorder.open_captures()))


def _finalize_again(run: BackendRun) -> SecondFinalize:
    """Call the backend's finalize hook once more, as a second shutdown path would."""
    from rlprof.plugins import hook_call

    prof, outcome = run.profiler, SecondFinalize()
    finalize = hook_call(run.backend, "finalize", check_pending=False)  # called as the core calls any hook
    if finalize is None:
        return outcome
    role = primary_role(prof.plan)
    ctx = finalize_context(prof.run, run.name, prof.tool_configs.get(role, {}).get(run.name, {}), None, (),
                           reason="end", profiled_steps=tuple(prof.plan.steps),
                           relocate_results=prof.config.global_.relocate_results)
    before = _snapshot(run.run_dir)
    try:
        results = [finalize(ctx=ctx)]
    except Exception as exc:
        outcome.error = exc
        results = []
    listed = {str(run.run_dir / a["path"]) for a in prof.artifacts if a["backend"] == run.name}
    returned = [path for path, _, _ in ctx.added_artifacts()]
    for result in results:
        if result is not None:
            returned.extend([result] if isinstance(result, (str, os.PathLike)) else list(result))
    outcome.new_paths = sorted({str(Path(p).absolute()) for p in returned} - listed)
    after = _snapshot(run.run_dir)
    outcome.changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and "/manifest/" not in p)
    return outcome


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for path in directory.rglob("*"):
        if path.is_file():
            stat = path.stat()
            found[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return found


@contextlib.contextmanager
def _sandbox(cwd: Path, tmp: Path, strict: bool | None, hook_timeout_s: float) -> Iterator[None]:
    """Run with ``cwd`` as working directory, ``tmp`` as the temporary directory, the hook watchdog's
    limit set to ``hook_timeout_s`` and, unless ``strict`` is None, ``RLPROF_STRICT`` set to it."""
    env = {"TMPDIR": str(tmp), "RLPROF_HOOK_TIMEOUT_S": repr(float(hook_timeout_s))}
    if strict is not None:
        env["RLPROF_STRICT"] = "1" if strict else "0"
    old_cwd, old_tempdir = os.getcwd(), tempfile.tempdir
    old_env = {key: os.environ.get(key) for key in env}
    os.chdir(cwd)
    tempfile.tempdir = str(tmp)
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(old_cwd)
        tempfile.tempdir = old_tempdir
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _Collect(logging.Handler):
    def __init__(self, into: list[logging.LogRecord]):
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record)


@contextlib.contextmanager
def _logged(into: list[logging.LogRecord]) -> Iterator[None]:
    logger = logging.getLogger("rlprof")
    handler = _Collect(into)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)

