"""tests/sharing.py keeps the tests of one module on one pytest-xdist worker, and the modules that read a shared
session run together, so that a module's expensive run (its verl run, its Ray cluster) happens once per suite.
Checked in a child pytest with two workers over a folder of small modules, with the plugin as the suite loads it.
(Before: with xdist 3.8 and pytest 9.2 the groups were ignored, and each worker that got one of a module's tests
made the module's run again.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

HERE = Path(__file__).resolve().parent

MODULE = '''
import json, os, pytest
from pathlib import Path

@pytest.fixture(scope="module")
def made():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("n", range(6))
def test_it(n, made, request):
    Path(os.environ["OUT"], f"{{request.node.module.__name__}}-{{n}}.json").write_text(json.dumps(made))
'''

SHARED = '''
import json, os
from pathlib import Path

def test_reads_the_run(demo_run, request):
    Path(os.environ["OUT"], f"{request.node.module.__name__}.json").write_text(json.dumps(demo_run))
'''


def test_a_modules_tests_and_the_shared_runs_readers_each_stay_on_one_worker(tmp_path):
    suite, out = tmp_path / "suite", tmp_path / "out"
    suite.mkdir()
    out.mkdir()
    (suite / "conftest.py").write_text('import os, pytest\npytest_plugins = ["sharing"]\n\n'
                                       '@pytest.fixture(scope="session")\ndef demo_run():\n'
                                       '    return os.environ["PYTEST_XDIST_WORKER"]\n')
    for name in ("test_one", "test_two", "test_three"):
        (suite / f"{name}.py").write_text(MODULE.replace("{{", "{").replace("}}", "}"))
    for name in ("test_reader_a", "test_reader_b", "test_reader_c"):
        (suite / f"{name}.py").write_text(SHARED)
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                           str(suite)], cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    for name in ("test_one", "test_two", "test_three"):
        workers = {worker for stem, worker in ran.items() if stem.startswith(f"{name}-")}
        assert len([s for s in ran if s.startswith(f"{name}-")]) == 6 and len(workers) == 1, (name, ran)
    assert len({ran[f"test_reader_{x}"] for x in "abc"}) == 1, ran  # the shared run is made once
