"""scripts/lib/steps.sh, the quiet and skippable steps of scripts/setup.sh and scripts/install-vllm.sh:
a good step prints one line (pip's noise hidden), a failing step prints all of its output (its ERROR
lines included), and a second run in an unchanged venv skips every step.

Runs the real shell functions on fake commands and a fake venv python (no pip, no network)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

STEPS = Path(__file__).resolve().parents[1] / "scripts" / "lib" / "steps.sh"


def bash(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """``script`` after sourcing steps.sh; stdout with each step's seconds written ``(N s)``."""
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail\nSTEPS_DIR=.stamps STEPS_PREFIX=setup\n. {STEPS}\n{script}"],
                          cwd=cwd, capture_output=True, text=True, timeout=60)
    proc.stdout = re.sub(r"\(\d+ s\)", "(N s)", proc.stdout)
    return proc


@pytest.fixture
def venv(tmp_path) -> Path:
    """A directory whose .venv/bin/python answers ``-m pip freeze --all`` with the file ``freeze``."""
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\ncat {tmp_path / 'freeze'}\n")
    python.chmod(0o755)
    (tmp_path / "freeze").write_text("torch==2.13.0\n")
    return tmp_path


def test_a_good_step_prints_one_line_and_hides_pips_noise(tmp_path):
    proc = bash("run_quiet 'torch' sh -c \"echo 'WARNING: Location file:///opt/pypi is ignored'; "
                "echo 'ERROR: pip dependency resolver ... verl 0.9.1 requires transformers<5.11' >&2\"", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["setup: torch (N s)"] and proc.stderr == ""


def test_a_failing_step_shows_its_whole_output_and_fails(tmp_path):
    proc = bash("run_quiet 'torch' sh -c \"echo 'Collecting torch'; echo 'ERROR: No matching distribution found for torch' >&2; exit 3\"\n"
                "echo 'not reached'", tmp_path)
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == ["setup: torch FAILED (exit 3); its output follows:", "Collecting torch",
                                        "ERROR: No matching distribution found for torch"]


def test_a_second_run_in_an_unchanged_venv_skips_every_step(venv):
    run = ("steps_begin\nstep 'one' '' -- sh -c 'echo ran >> log'\nstep 'two' 'input' -- sh -c 'echo ran >> log'\n"
           "steps_end\nsteps_ran_any && echo 'ran some' || echo 'ran none'")
    (venv / "input").write_text("a\n")
    assert bash(run, venv).stdout.splitlines()[-1] == "ran some"
    assert bash(run, venv).stdout.splitlines() == ["ran none"]  # nothing printed, nothing run
    assert (venv / "log").read_text().count("ran") == 2
    (venv / "input").write_text("b\n")  # step two's input changed: it runs again, step one does not
    assert bash(run, venv).stdout.splitlines() == ["setup: two (N s)", "ran some"]
    (venv / "freeze").write_text("torch==2.12.0\n")  # someone changed the venv: every step runs
    assert bash(run, venv).stdout.splitlines() == ["setup: one (N s)", "setup: two (N s)", "ran some"]


def test_a_run_that_fails_half_way_does_not_vouch_for_the_venv(venv):
    good = "steps_begin\nstep 'one' '' -- true\nstep 'two' '' -- true\nsteps_end"
    assert bash(good, venv).returncode == 0
    (venv / "freeze").write_text("torch==2.12.0\n")
    assert bash("steps_begin\nstep 'one' '' -- true\nstep 'two' '' -- false\nsteps_end", venv).returncode == 1
    (venv / "freeze").write_text("torch==2.13.0\n")  # back as the last full run left it, yet step two never finished
    assert bash(good, venv).stdout.splitlines() == ["setup: one (N s)", "setup: two (N s)"]
