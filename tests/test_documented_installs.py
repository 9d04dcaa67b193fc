"""The install line the docs tell a user to run once for verl's real trainer (examples/verl-cpu) changes
nothing in a venv that scripts/setup.sh set up.

Why: setup.sh installs vLLM's CPU build last, which needs transformers 5.19; a requirement that pinned
verl's own ``transformers<5.11`` made the documented line put 5.10.4 back over it and break vLLM. The
line is read from each document that shows it and run as real pip with ``--dry-run --no-index``: pip
may use only what is installed, so a requirement the venv does not satisfy fails the resolution, and
anything it would still install or change is listed in its ``--report``. No network is used.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^\.venv/bin/python -m pip install (-r examples/verl-cpu/requirements\.txt[^\n]*)$", re.M)
DOCS = ("examples/verl-cpu/README.md", "docs/verl.md")


def test_the_verl_examples_install_line_changes_nothing_in_a_set_up_venv():
    pytest.importorskip("transfer_queue", reason="the verl example's requirements are not installed (scripts/setup.sh "
                                                 "installs them): nothing to compare with")
    shown = {doc: LINE.findall((ROOT / doc).read_text()) for doc in DOCS}
    assert all(len(lines) == 1 for lines in shown.values()), f"each document shows the install line once: {shown}"
    (line,) = {lines[0] for lines in shown.values()}  # one line, so one dry run checks every document
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--quiet", "--report", "-",
                           *shlex.split(line)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, f"pip cannot satisfy the documented line from what is installed:\n{proc.stderr[-3000:]}"
    changes = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in json.loads(proc.stdout)["install"]]
    assert changes == [], f"the documented line would install {changes}"


def test_setup_installs_the_same_requirements_the_docs_show():
    """setup.sh's step and the documented line are one command (the torch pin included), so that the docs
    can say setup has already run it."""
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    (documented,) = LINE.findall((ROOT / DOCS[0]).read_text())
    assert shlex.split(documented) == ["-r", "examples/verl-cpu/requirements.txt", "torch==2.13.0"]
    assert 'pip install -r examples/verl-cpu/requirements.txt "torch==2.13.0"' in setup
