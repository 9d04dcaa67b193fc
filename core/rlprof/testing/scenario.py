"""A scripted training loop that drives one backend through a real :class:`~rlprof.Profiler`: the player.

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

Its parts: the script and the result (:mod:`rlprof.testing.scenario_spec`, re-exported here), the player
(this module), fault injection and the sandbox (:mod:`rlprof.testing.faults`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable

from rlprof.context import finalize_context
from rlprof.layout import safe_name
from rlprof.manifest import read_records
from rlprof.runtime.plan import primary_role
from rlprof.testing.faults import _failing_after, _logged, _sandbox, _snapshot
from rlprof.testing.footprint import Footprint
from rlprof.testing.recorder import RecordingBackend
from rlprof.testing.scenario_spec import (LIFECYCLE_HOOKS, RAY_BLOCKED_SIGNALS, RECORDER, STAGES, BackendRun,  # noqa: F401
                                          BackendSpec, InjectedFailure, Scenario, ScriptedFailure, ScriptedHookFailure,
                                          SecondFinalize)


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
        if run_dir.exists():  # a step split handed on at finalize is written after it, by design: let it land
            from rlprof.analysis.late_split import wait  # before judging what a second finalize touches

            wait(run_dir)
        first = list(prof.artifacts)
        run.second_finalize = _finalize_again(run)
        run.second_finalize.profiler_repeat_differs = prof.finalize() != first
    run.records = list(read_records([run_dir])) if run_dir.exists() else []
    return run


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

