"""How the suite is split between pytest-xdist's workers without running an expensive run twice: a pytest plugin,
loaded by the repository's root conftest.py (docs/contributing.md, "Two workers").

Where pytest-xdist is installed (scripts/setup.sh installs it), a run of the whole suite or of a tier (no file or
test named on the command line) uses :data:`WORKERS` workers, ``--dist loadgroup``: side by side on the 2-core
VM the fast tier took 225 s so against 381 s in one process (1.7x). A run that names files or tests stays in one
process, and ``-n N`` (``-n 0``: one process) always wins.

Each worker is a pytest session of its own, so a module- or session-scoped fixture runs once per worker that
asks for it. The tests of one module therefore stay on one worker (its Ray cluster, its verl run), and the tests
of several modules that read one session run (``demo_run``'s demos, ``armed_demo``) stay together with them: each
test gets an ``xdist_group`` mark naming its module, or one group for every module that reads a shared run,
before xdist groups them; so do the modules that run a tool two workers cannot run at once (:data:`ONE_AT_A_TIME`).
Without xdist this does nothing.
"""

from __future__ import annotations

import os

import pytest

WORKERS = 2
"""Workers for a whole run: the VM's 2 cores (the suite's heavy runs use both, so more would only queue)."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Before xdist decides (its ``pytest_configure`` runs last): two workers for a run of the suite's own paths."""
    if (not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput")
            or getattr(config.option, "numprocesses", 0) is not None or config.getoption("usepdb", False)
            or config.getvalue("collectonly") or config.args_source != pytest.Config.ArgsSource.TESTPATHS
            or (os.cpu_count() or 1) < WORKERS):
        return
    config.option.numprocesses = WORKERS
    config.option.dist = "loadgroup"
    config.option.tx = ["popen"] * WORKERS

SHARED_RUNS = ("demo_run", "armed_demo")
"""Session fixtures that several modules read: those modules go to one worker, whole."""
SHARED_GROUP = "shared-runs"
ONE_AT_A_TIME = {"nsys": ("plugins/nsys/tests/", "tests/analysis/test_breakdown_files.py",
                          "tests/integrations/test_verl_trainer.py")}
"""Modules that use a tool two workers cannot run at once: the real Nsight Systems CLI (a second ``nsys profile``
beside another fails with exit status 1, seen under ``-n 2``)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if getattr(config.option, "dist", "no") == "no":
        return
    sharing = {item.nodeid.split("::", 1)[0] for item in items
               if any(name in getattr(item, "fixturenames", ()) for name in SHARED_RUNS)}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        tool = next((name for name, paths in ONE_AT_A_TIME.items() if module.startswith(paths)), None)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(tool or (SHARED_GROUP if module in sharing else module)))
