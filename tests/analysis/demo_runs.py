"""Real ``rlprof demo`` runs for the analysis tests (the session fixture ``demo_run`` is in conftest.py):
how a test runs the ``rlprof`` command, and the flags the shared runs are made with."""

from __future__ import annotations

import subprocess
import sys

SIX_STEPS = ("--steps", "1,2,3,4,5,6")
"""Six profiled steps: ``compare`` leaves the first out as warm-up and has 5 steps x 2 ranks a side."""


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlprof.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
