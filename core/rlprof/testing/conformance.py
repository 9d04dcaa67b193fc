"""The conformance suite: runs the backend contract (:mod:`rlprof.testing.contract`) against a
backend over every scripted scenario, and reports what is wrong in plain words.

Every backend rlprof ships passes it in CI, and a third-party backend runs the same thing::

    from rlprof.testing.conformance import check_backend
    check_backend("mybackend")            # raises ConformanceFailure listing every problem

or, in a pytest file, one test per part of the suite::

    from rlprof.testing.conformance import BackendConformance

    class TestMyBackend(BackendConformance):
        backend = "mybackend"             # entry-point name, backend class, or instance
        tool_config = {"level": "basic"}  # optional: the tool_config section to run with
        work = busy_loop                  # optional: a function run in every iteration
        region_s = 0.3                    # optional: each region lasts at least this long (sampling profilers)
        module = model                    # optional: the model every region runs (ctx.module); work calls it

The parts (:data:`SUITE_PARTS`): the static checks of the backend object, then one scripted run per
scenario in :data:`SCENARIOS` — end-to-end, continuous steps, discrete, sampling windows in both
modes, a region that raises and the trainer goes on, a region that raises inside a sampling window,
a region that raises and the process exits, nested regions in both modes, a continuous run entered
in the middle (training resumed), a step whose ``step_boundary()`` the trainer forgot, two roles of
one process on two colocated Profilers, every hook on a thread that blocks SIGINT, SIGTERM and
SIGCHLD (as Ray's actor threads do: a subprocess started there inherits the mask), and, for each lifecycle hook, the backend raising right
after it ran and being released by the core — each checked by every check of
:data:`~rlprof.testing.contract.RUN_CHECKS`.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from rlprof.runtime.registry import CONTEXT_CLASSES
from rlprof.testing.contract import RUN_CHECKS, STATIC_CHECKS, Subject, implemented
from rlprof.testing.scenario import LIFECYCLE_HOOKS, BackendRun, BackendSpec, Scenario, backend_factory, run_scenario



def _released_after(hook: str) -> Scenario:
    """The scenario whose backend raises right after its first ``hook``, in the mode where the core calls
    ``hook``, told by its context's fields: a region's hooks (a ``region`` field) in discrete mode, an
    iteration's (an ``iteration`` field) inside a sampled window, the others end-to-end."""
    fields = {f.name for f in dataclasses.fields(CONTEXT_CLASSES[hook])}
    return Scenario(f"released_after_{hook}", mode="discrete" if "region" in fields else "e2e", steps=(1, 2),
                    fail_after=hook, schedule={"active": 2} if "iteration" in fields else None)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("end_to_end", mode="e2e", steps=(1, 3)),
    Scenario("continuous_steps", mode="e2e", steps=(1, 2), continuous=True),
    Scenario("discrete", mode="discrete", steps=(1, 2)),
    Scenario("sampled_end_to_end", mode="e2e", steps=(1,), iterations=4, schedule={"skip_first": 1, "active": 2}),
    Scenario("sampled_discrete", mode="discrete", steps=(1,), iterations=4, schedule={"wait": 1, "active": 1, "repeat": 2}),
    Scenario("error_in_region", mode="discrete", steps=(1, 2), raise_in="actor"),
    Scenario("error_in_sampled_window", mode="discrete", steps=(1,), iterations=4, schedule={"active": 3},
             raise_in="actor", raise_at_iteration=1),
    Scenario("error_then_exit", mode="e2e", steps=(1, 2), raise_in="actor", after_raise="exit"),
    Scenario("nested_end_to_end", mode="e2e", steps=(1, 2), nested=True),
    Scenario("nested_discrete", mode="discrete", steps=(1, 2), nested=True),
    Scenario("resumed_continuous", mode="e2e", steps=(1, 2, 3), continuous=True, first_step=2),
    Scenario("missing_step_boundary", mode="e2e", steps=(1, 2), forget_boundary_at=1),
    Scenario("colocated_roles", mode="e2e", steps=(1, 2), roles=("actor", "critic"), colocated=True),
    Scenario("blocked_signals", mode="discrete", steps=(1, 2), blocked_signals=True),
    *(_released_after(hook) for hook in LIFECYCLE_HOOKS),
)}
"""The scripted runs every backend goes through, by name."""

SUITE_PARTS = tuple(STATIC_CHECKS) + tuple(SCENARIOS)
"""Every part of the suite by name: what :meth:`Conformance.check` and the tests of
:class:`BackendConformance` run one at a time."""


@dataclass(frozen=True)
class Problem:
    """One broken promise, in words: where it showed (a scenario or a static check) and what is wrong."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.where}] {self.message}"


class ConformanceFailure(AssertionError):
    """Raised when a backend breaks the contract; the message lists every problem found."""

    def __init__(self, report: "ConformanceReport"):
        self.report = report
        super().__init__(report.explain())


@dataclass
class ConformanceReport:
    """The outcome of checking one backend."""

    backend: str
    problems: list[Problem] = field(default_factory=list)
    runs: dict[str, BackendRun] = field(default_factory=dict)
    """The scripted runs by scenario name (their files stay under ``workdir`` for inspection)."""
    implemented: tuple[str, ...] = ()
    """The hooks the backend implements."""
    exercised: set[str] = field(default_factory=set)
    """The hooks the suite called on it."""
    unreached: tuple[str, ...] = ()
    """Hooks it implements that no part of the suite reached: no scripted run makes the core call them
    (an optional hook called only under conditions a scenario does not create). Said, never a problem:
    the suite fails a backend only for what it saw the backend do."""
    workdir: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def explain(self) -> str:
        if self.ok:
            return (f"backend {self.backend!r} keeps the rlprof backend contract ({len(self.runs)} scenarios)"
                    + (f"; no scenario reached its {', '.join(self.unreached)}" if self.unreached else ""))
        lines = [f"backend {self.backend!r} breaks the rlprof backend contract ({len(self.problems)} problem"
                 f"{'s' if len(self.problems) != 1 else ''}):"]
        for where in dict.fromkeys(p.where for p in self.problems):
            run = self.runs.get(where)
            lines.append(f"  in {where}" + (f" ({run.scenario.describe()}):" if run else ":"))
            lines.extend(_indent(p.message, "    - ") for p in self.problems if p.where == where)
        if self.workdir is not None:
            lines.append(f"  files of the runs are kept in {self.workdir}")
        lines.append("  the contract: docs/writing-a-backend.md")
        return "\n".join(lines)

    def raise_if_failed(self) -> "ConformanceReport":
        if self.problems:
            raise ConformanceFailure(self)
        return self


def _indent(text: str, first: str) -> str:
    pad = " " * len(first)
    return first + text.replace("\n", "\n" + pad)


# --------------------------------------------------------------------------- the engine


class Conformance:
    """Checks one backend; :func:`check_backend` and :class:`BackendConformance` are built on it.

    :param backend: an entry-point name (loaded the way the core loads it), a class, or an instance.
    :param name: the name to run a class or instance under (default: its ``name`` attribute or class name).
    :param tool_config: the backend's ``tool_config`` section for every run.
    :param work: called inside every iteration of every region (default: a little arithmetic).
    :param hook_timeout_s: a hook call that makes training wait longer than this fails the suite (the
        hook watchdog's ``timeout`` record); default 10.
    :param region_s: every region of every scenario lasts at least this long (its iterations repeat
        ``work``): a sampling profiler needs time to take samples. Default 0: as fast as the work goes.
    :param module: the model every region runs (``prof.role(..., module=module)``: the backend's
        ``ctx.module``), for a backend that hooks into it (``precision_debugger``); ``work`` should call it.
        Default None: regions name no model.
    """

    def __init__(self, backend: BackendSpec, *, name: str | None = None, tool_config: Mapping[str, Any] | None = None,
                 work: Callable[[], Any] | None = None, region_s: float = 0.0, hook_timeout_s: float = 10.0,
                 module: Any = None):
        if region_s < 0:
            raise ValueError(f"region_s: got {region_s!r}; allowed: seconds >= 0")
        if not hook_timeout_s > 0:
            raise ValueError(f"hook_timeout_s: got {hook_timeout_s!r}; allowed: seconds > 0")
        self.hook_timeout_s = float(hook_timeout_s)
        self.spec = backend
        self.name, self.make = backend_factory(backend, name)
        self.tool_config = dict(tool_config or {})
        self.work = work
        self.region_s = float(region_s)
        self.module = module

    def check_static(self, check: str, report: ConformanceReport) -> list[Problem]:
        """Run one of :data:`STATIC_CHECKS`; problems are also added to ``report``."""
        try:
            plugin = self.make()
        except Exception as exc:
            problems = [Problem(check, f"the backend cannot be created: {type(exc).__name__}: {exc}")]
        else:
            report.implemented = tuple(implemented(plugin))
            subject = Subject(plugin, self.name, self.tool_config, report.exercised)
            problems = [Problem(check, m) for m in STATIC_CHECKS[check](subject)]
        report.problems.extend(problems)
        return problems

    def check_scenario(self, scenario: Scenario | str, workdir: Path, report: ConformanceReport) -> list[Problem]:
        """Play one scenario in ``workdir`` and check the run; problems are also added to ``report``."""
        scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        scenario = replace(scenario, tool_config={**scenario.tool_config, **self.tool_config},
                           region_s=max(scenario.region_s, self.region_s), hook_timeout_s=self.hook_timeout_s)
        try:
            run = run_scenario(self.spec, scenario, Path(workdir) / scenario.name, name=self.name, work=self.work, strict=False,
                               module=self.module)
        except Exception as exc:
            trace = "".join(traceback.format_exception(exc)).rstrip().splitlines()[-8:]
            messages = [f"the scripted run itself failed: {type(exc).__name__}: {exc}\n" + "\n".join(trace)]
        else:
            report.runs[scenario.name] = run
            report.exercised.update(hook for hook, _ in run.recorder.calls)
            if run.injected is not None and run.injected.raised:  # the stand-in saw the core call it
                report.exercised.add(run.injected.hook)
            messages = [m for check in RUN_CHECKS for m in check(run)]
        problems = [Problem(scenario.name, m) for m in messages]
        report.problems.extend(problems)
        return problems

    def check(self, part: str, workdir: Path | None = None) -> ConformanceReport:
        """Run one part of the suite (a name from :data:`SUITE_PARTS`); the report is not raised."""
        report = ConformanceReport(backend=self.name, workdir=workdir)
        if part in STATIC_CHECKS:
            self.check_static(part, report)
        elif part in SCENARIOS:
            self.check_scenario(part, self._workdir(workdir), report)
        else:
            raise ValueError(f"conformance part: got {part!r}; allowed: {', '.join(SUITE_PARTS)}")
        return report

    def check_all(self, workdir: Path | None = None, scenarios: Any = None) -> ConformanceReport:
        """Run every static check and every scenario (or those given); the report is not raised."""
        workdir = self._workdir(workdir)
        report = ConformanceReport(backend=self.name, workdir=workdir)
        for check in STATIC_CHECKS:
            self.check_static(check, report)
        for scenario in SCENARIOS.values() if scenarios is None else scenarios:
            self.check_scenario(scenario, workdir, report)
        if scenarios is None:  # what no part reached: said, never the backend's failure
            report.unreached = tuple(h for h in report.implemented if h not in report.exercised)
        return report

    def _workdir(self, workdir: Path | None) -> Path:
        if workdir is not None:
            return Path(workdir)
        return Path(tempfile.mkdtemp(prefix=f"rlprof-conformance-{self.name}-"))


def check_backend(backend: BackendSpec, *, name: str | None = None, tool_config: Mapping[str, Any] | None = None,
                  work: Callable[[], Any] | None = None, workdir: Path | None = None, scenarios: Any = None,
                  region_s: float = 0.0, hook_timeout_s: float = 10.0, module: Any = None) -> ConformanceReport:
    """Check ``backend`` against the whole contract; return the report, or raise :class:`ConformanceFailure`
    whose message lists every problem in plain words. ``scenarios``: a subset of :data:`SCENARIOS`
    (names or :class:`Scenario` objects); default all."""
    if scenarios is not None:
        scenarios = [SCENARIOS[s] if isinstance(s, str) else s for s in scenarios]
    report = Conformance(backend, name=name, tool_config=tool_config, work=work, region_s=region_s,
                         hook_timeout_s=hook_timeout_s, module=module).check_all(workdir, scenarios)
    if report.ok and workdir is None:  # a temporary directory of our own: keep it only to inspect failures
        shutil.rmtree(report.workdir, ignore_errors=True)
        report.workdir = None
    return report.raise_if_failed()


class BackendConformance:
    """Subclass it in a test file as ``class TestMyBackend(BackendConformance)`` and set :attr:`backend`:
    pytest then runs one test per static check and per scenario, each failing with the problems it found.

    Override a test method with a ``pytest.skip`` to leave one out, with the reason written down.
    """

    backend: BackendSpec = None
    """Entry-point name, backend class or instance."""
    backend_name: str | None = None
    """The name to run a class or instance under (default: its ``name`` attribute or class name)."""
    tool_config: Mapping[str, Any] = {}
    work: Callable[[], Any] | None = None
    """Called inside every iteration, e.g. a small torch matmul for a backend that records operators."""
    region_s: float = 0.0
    """Each region lasts at least this long (seconds): set it for a sampling profiler (py-spy), which
    needs time to take samples."""
    hook_timeout_s: float = 10.0
    """A hook call that makes training wait longer than this fails the test."""
    module: Any = None
    """The model every region runs (the backend's ``ctx.module``); ``work`` should call it."""

    def _conformance(self) -> Conformance:
        if self.backend is None:
            import pytest

            pytest.skip(f"{type(self).__name__}: set the class attribute backend = '<entry point name>'")
        # looked up on the class: a plain function stays a function there (not a bound method)
        return Conformance(self.backend, name=self.backend_name, tool_config=self.tool_config, work=type(self).work,
                           region_s=self.region_s, hook_timeout_s=self.hook_timeout_s, module=self.module)

    def _check(self, part: str, tmp_path: Path | None = None) -> None:
        self._conformance().check(part, tmp_path).raise_if_failed()

    def test_registers(self):
        self._check("registers")

    def test_check_environment(self):
        self._check("check_environment")

    def test_validate_tool_config(self):
        self._check("validate_tool_config")

    def test_worker_runtime_env(self):
        self._check("worker_runtime_env")


def _scenario_test(name: str) -> Callable:
    def test(self, tmp_path):
        self._check(name, tmp_path)

    test.__name__ = f"test_{name}"
    test.__doc__ = f"The {name} scenario: {SCENARIOS[name].describe()}."
    return test


for _name in SCENARIOS:  # one test per scenario, so a subclass lists each by name in pytest's output
    setattr(BackendConformance, f"test_{_name}", _scenario_test(_name))
