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
The workers, which collect the tests, write each test's group to a folder the controller made; the controller's
scheduler (:func:`pytest_xdist_make_scheduler`) reads them (xdist 3.8's own reading of the mark is lost on pytest 9).
Without xdist this does nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

WORKERS = 2
"""Workers for a whole run: the VM's 2 cores (the suite's heavy runs use both, so more would only queue)."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    _choose_workers(config)
    if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") == "loadgroup":
        # before the workers start (they inherit the environment): where they write their tests' groups
        os.environ[GROUPS_ENV] = tempfile.mkdtemp(prefix="rlprof-xdist-groups-")


def _choose_workers(config):
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
    # an xdist worker's own option says "no" (xdist tells the worker to group through ``loadgroup``): the groups
    # are decided where the tests are collected, on the workers; a plain run needs none
    if not hasattr(config, "workerinput"):
        return
    sharing = {item.nodeid.split("::", 1)[0] for item in items
               if any(name in getattr(item, "fixturenames", ()) for name in SHARED_RUNS)}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        tool = next((name for name, paths in ONE_AT_A_TIME.items() if module.startswith(paths)), None)
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(tool or (SHARED_GROUP if module in sharing else module)))
    folder = os.environ.get(GROUPS_ENV)
    if folder:  # where the controller's scheduler reads them (see pytest_xdist_make_scheduler)
        groups = {item.nodeid: str(item.get_closest_marker("xdist_group").args[0]) for item in items}
        Path(folder, f"{config.workerinput['workerid']}.json").write_text(json.dumps(groups))


GROUPS_ENV = "RLPROF_XDIST_GROUPS"
"""A folder the controller makes for a run on workers: each worker writes its tests' groups there."""


def pytest_unconfigure(config):
    folder = os.environ.get(GROUPS_ENV)
    if folder and not hasattr(config, "workerinput"):
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``loadgroup`` by the groups the workers decided: xdist's own reads a group from the test's id (``id@group``,
    set through ``item._nodeid``), which pytest 9 no longer reads (it keeps ``item._id``), so with xdist 3.8 and
    pytest 9.2 every test was its own group and a module's shared run (its verl run, its Ray cluster) ran once per
    worker: test_verl_fully_async's two verl runs, side by side, in one CI run."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    folder = os.environ.get(GROUPS_ENV)
    known: dict[str, str] = {}

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if not known and folder:
                for path in Path(folder).glob("*.json"):
                    known.update(json.loads(path.read_text()))
            return known.get(nodeid) or nodeid.split("::", 1)[0]  # else its module

    return ByGroup(config, log)
