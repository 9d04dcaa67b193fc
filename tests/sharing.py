"""How the suite is split between pytest-xdist's workers (``-n 2 --dist loadgroup``) without running an expensive
run twice: a pytest plugin, loaded by the repository's root conftest.py (docs/contributing.md).

Each worker is a pytest session of its own, so a module- or session-scoped fixture runs once per worker that
asks for it. The tests of one module therefore stay on one worker (its Ray cluster, its verl run), and the tests
of several modules that read one session run (``demo_run``'s demos, ``armed_demo``) stay together with them: each
test gets an ``xdist_group`` mark naming its module, or one group for every module that reads a shared run,
before xdist groups them; so do the modules that run a tool two workers cannot run at once (:data:`ONE_AT_A_TIME`).
Without xdist this does nothing.
"""

from __future__ import annotations

import pytest

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
