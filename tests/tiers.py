"""The suite's two tiers (docs/contributing.md): ``pytest -m "not slow"`` runs every test that starts no heavy
real part, and a test that starts one carries the ``slow`` marker. Kept without timing anything: what starts a
heavy part refuses to run in a test without the marker, so a heavy test cannot slip into the fast tier.

Two ways a start is caught (a pytest plugin, loaded by the repository's root conftest.py):

* the suite's fixtures and helpers that start a heavy part call :func:`heavy` first (a demo, verl's trainer, a
  vLLM engine, a virtualenv, a browser, a Ray cluster);
* while a test without the marker runs, starting a heavy program from this process fails the test: Ray's own
  processes (``ray.init`` or ``ray.cluster_utils.Cluster`` here), Chromium, ``python -m venv``, verl's example
  trainer (``examples/verl-cpu/run.py``), and ``ray.init`` itself where Ray is imported.

What runs inside a child process (a demo's own Ray cluster) is not seen here: the helper that starts the
child calls :func:`heavy`.

A run also gathers how long each test without the marker took; ``--unmarked-over SECONDS`` prints those that
took longer (``.ci/run`` asks for 5 s): a report, never a failure, since the tier is kept by the rule above.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

MARKER = "slow"

HEAVY_PROGRAMS = {
    "gcs_server": "a Ray cluster", "raylet": "a Ray cluster", "chromium": "a browser", "chrome": "a browser",
    "run.py": "verl's trainer (examples/verl-cpu/run.py)",
}
"""A program's file name -> the heavy part it is (``run.py`` only under examples/verl-cpu)."""

_current: pytest.Item | None = None
"""The test being set up, run or torn down (the one a fixture it asked for runs for)."""


def heavy(what: str) -> None:
    """Called before a heavy real part starts (``what`` names it: "an rlprof demo"): fails the current test
    unless it carries the ``slow`` marker. Outside a test (a script importing a helper) it does nothing."""
    item = _current
    if item is not None and item.get_closest_marker(MARKER) is None:
        pytest.fail(f"{item.nodeid} starts {what} but is not marked slow: add @pytest.mark.slow (the fast tier, "
                    f"pytest -m \"not slow\", starts no heavy part; docs/contributing.md)", pytrace=False)


def _heavy_command(args: Any) -> str | None:
    """The heavy part a command line starts, or None."""
    if isinstance(args, (str, bytes, os.PathLike)):
        words = [os.fsdecode(args)]
    else:
        words = [os.fsdecode(a) for a in args]
    if not words:
        return None
    program = os.path.basename(words[0])
    for name, what in HEAVY_PROGRAMS.items():
        if program.startswith(name) and (name != "run.py" or "verl-cpu" in words[0]):
            return what
    rest = words[1:]
    for i, word in enumerate(rest):
        if word.endswith(os.path.join("verl-cpu", "run.py")):
            return HEAVY_PROGRAMS["run.py"]
        if word == "-m" and i + 1 < len(rest) and rest[i + 1] in ("venv", "virtualenv"):
            return "a virtualenv"
    return None


_execute_child = subprocess.Popen._execute_child


def _guarded_execute_child(self, args, executable, *more, **kwargs):
    """``Popen``'s start of a child (every subclass's too: Ray's ``ConsolePopen``): :func:`heavy` first."""
    what = _heavy_command(args)
    if what is not None:
        heavy(what)
    return _execute_child(self, args, executable, *more, **kwargs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    _current = item
    guarded = item.get_closest_marker(MARKER) is None
    ray_init = None
    if guarded:
        subprocess.Popen._execute_child = _guarded_execute_child
        ray = sys.modules.get("ray")
        if ray is not None and hasattr(ray, "init"):
            ray_init = ray.init

            def init(*args, **kwargs):
                heavy("a Ray cluster (ray.init)")
                return ray_init(*args, **kwargs)

            ray.init = init
    try:
        yield
    finally:
        subprocess.Popen._execute_child = _execute_child
        if ray_init is not None:
            sys.modules["ray"].init = ray_init
        _current = None


def pytest_addoption(parser):
    parser.addoption("--unmarked-over", type=float, default=None, metavar="SECONDS",
                     help="print the tests without the slow marker that took longer than SECONDS (a report; "
                          "docs/contributing.md)")


_unmarked: dict[str, float] = {}
"""Each test without the marker: its setup, call and teardown, in seconds."""


def pytest_runtest_logreport(report):
    if MARKER not in report.keywords:
        _unmarked[report.nodeid] = _unmarked.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    limit = config.getoption("--unmarked-over")
    if limit is None:
        return
    over = sorted(((d, n) for n, d in _unmarked.items() if d > limit), reverse=True)
    terminalreporter.section(f"tests without the slow marker over {limit:g} s (a report, not a failure)")
    if not over:
        terminalreporter.write_line("none")
    for duration, nodeid in over:
        terminalreporter.write_line(f"{duration:7.2f}s {nodeid}")
