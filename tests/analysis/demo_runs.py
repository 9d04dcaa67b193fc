"""Real ``rlprof demo`` runs for the analysis tests (the session fixture ``demo_run`` is in conftest.py):
how a test runs the ``rlprof`` command, and the flags the shared runs are made with."""

from __future__ import annotations

import os
import subprocess
import sys

SIX_STEPS = ("--steps", "1,2,3,4,5,6")
"""Six profiled steps: ``compare`` leaves the first out as warm-up and has 5 steps x 2 ranks a side."""


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    """The runs these tests compare are timed to the millisecond on a 2-core machine: their profiled steps'
    in-run analysis (a child process per trace, RLPROF_STEP_SPLIT) is left out, as its CPU is not the demo's
    (one rehearsal flagged the slowed rank in 1 of 6 steps with it; the split itself is tested in tests/cli)."""
    env = {**os.environ, "RLPROF_STEP_SPLIT": "0"}
    return subprocess.run([sys.executable, "-m", "rlprof.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)
