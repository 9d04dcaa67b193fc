"""Shared fixtures of rlprof's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from installing import discoverable, private_site  # tests/installing.py
from tiers import heavy  # tests/tiers.py

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIST = ROOT / "tests" / "fixtures" / "rlprof-test-backends"
PLUGINS_DIST = ROOT / "tests" / "fixtures" / "rlprof-test-plugins"


@pytest.fixture(scope="session")
def test_backends_site(tmp_path_factory) -> Path:
    """``rlprof-test-backends``, pip-installed privately (:func:`private_site`)."""
    return private_site(tmp_path_factory, FIXTURE_DIST, "test-backends")


@pytest.fixture
def test_backends(test_backends_site, monkeypatch) -> Path:
    """Makes the test backends discoverable through ``importlib.metadata`` for one test."""
    return discoverable(test_backends_site, monkeypatch, "rlprof_test_backends")


@pytest.fixture(scope="session")
def test_plugins_site(tmp_path_factory) -> Path:
    """``rlprof-test-plugins`` (the hooks called outside a run, the deprecated groups, a broken plugin of
    each kind), pip-installed privately (:func:`private_site`)."""
    return private_site(tmp_path_factory, PLUGINS_DIST, "test-plugins")


@pytest.fixture
def test_plugins(test_plugins_site, monkeypatch) -> Path:
    """Makes the loader's test plugins discoverable through ``importlib.metadata`` for one test, with
    nothing said yet in this process (:func:`rlprof.notices.forget`): each message is seen exactly once."""
    from rlprof import notices

    notices.forget()
    return discoverable(test_plugins_site, monkeypatch, "rlprof_test_plugins")


@pytest.fixture
def save_path(tmp_path) -> Path:
    return tmp_path / "profile"


@pytest.fixture(scope="session")
def verl_generated_config(tmp_path_factory) -> Path:
    """verl 0.9.1's own composed trainer config, ``verl/trainer/config/_generated_ppo_trainer.yaml``."""
    import zipfile

    from rlprof.testing.downloads import cached_wheel

    wheel = cached_wheel("verl==0.9.1", "verl-0.9.1-")
    target = tmp_path_factory.mktemp("verl") / "_generated_ppo_trainer.yaml"
    with zipfile.ZipFile(wheel) as zf:
        target.write_bytes(zf.read("verl/trainer/config/_generated_ppo_trainer.yaml"))
    return target


@pytest.fixture
def rlprof_cli(capsys):
    """``rlprof ARGS`` run in this process through :func:`rlprof.cli.main`, the function the
    ``rlprof`` script calls: returns ``(returncode, stdout, stderr)`` named as a CompletedProcess's
    fields. A subprocess costs an interpreter start and the imports (about a second each); keep one
    only where the test is about the process itself (signals, a pipe, the installed script, a fresh
    interpreter's imports, a hang guarded by a timeout)."""
    from types import SimpleNamespace

    from rlprof.cli import main

    def run(*args) -> SimpleNamespace:
        capsys.readouterr()  # what the test printed before is not the command's
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # a command's own --help
            code = exit_.code if isinstance(exit_.code, int) else 0 if exit_.code is None else 1
        out, err = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out, stderr=err)

    return run


ARMED_SLOW_FROM = 9
"""The armed demo's rank 1 is late from this step on."""
ARMED_TRAIN_STEPS = 10


@pytest.fixture(scope="session")
def armed_demo(tmp_path_factory):
    """One armed ``rlprof demo`` (issue 42) for every test of unplanned captures (tests/cli/test_demo_unplanned.py,
    tests/analysis/test_step_series.py): nothing planned, ``rlprof capture`` asked once step 3 has started, rank 1
    late by 9000 ms from step 9 and ``trigger.slow_step=15`` (window 5). The slowdown is planted far above any noise:
    it fires while the others' median is under 600 ms, and an unslowed step would have to take 15x it (before: 300 ms
    against a factor of 1.5, which a loaded step could pass; then 1500 ms against 5, which a step 8 passed at a
    load average of 11, two verl runs beside the suite; then 3000 ms against 20, which a CI run whose steps' median
    was over 150 ms never reached, while one unslowed step of another demo there took 7x its run's median). Returns its output, what ``rlprof capture`` said,
    ``rlprof report --json``'s run and the run directory."""
    heavy("an rlprof demo")
    pytest.importorskip("ray")
    import json
    import subprocess
    import sys
    import time

    save = tmp_path_factory.mktemp("armed") / "save"
    demo = subprocess.Popen(
        [sys.executable, "-m", "rlprof.cli", "demo", "--workers", "2", "--train-steps", str(ARMED_TRAIN_STEPS),
         "--slow-rank", "1", "--slow-ms", "9000", "--slow-from-step", str(ARMED_SLOW_FROM), "--save-path", str(save),
         "global_profiler.steps=null", "global_profiler.trigger.slow_step=15", "global_profiler.trigger.window=5"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=save.parent)
    lines, asked = [], None
    deadline = time.monotonic() + 600
    for line in demo.stdout:
        lines.append(line)
        if asked is None and line.startswith("step 3 "):  # step 3 has started: ask for a capture
            asked = subprocess.run([sys.executable, "-m", "rlprof.cli", "capture", str(save), "--wait", "300"],
                                   capture_output=True, text=True, timeout=400)
        if time.monotonic() > deadline:
            demo.kill()
            break
    demo.wait(timeout=120)
    output = "".join(lines)
    assert demo.returncode == 0, output[-4000:]
    assert asked is not None and asked.returncode == 0, (asked.stdout + asked.stderr) if asked else output[-3000:]
    [run_dir] = [d for d in save.iterdir() if d.is_dir()]
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=300)
    [run] = json.loads(report.stdout)["runs"]
    return {"output": output, "asked": asked.stdout, "run": run, "run_dir": run_dir, "slow_from": ARMED_SLOW_FROM,
            "train_steps": ARMED_TRAIN_STEPS}
