"""The backends follow the core's decisions and never re-make them (DESIGN.md: "what" belongs to the core)."""

from __future__ import annotations

import re
from pathlib import Path

import rlprof_torch

SELECTION_WORDS = re.compile(r"(?<![.\w])(ranks|all_ranks|steps|discrete|enable|profile_continuous_steps)\b(?!=)")
"""The settings' names as words; not an attribute of a core object (``ctx.capture.steps``: the core's
resolved decision) nor a keyword argument to a core API (``ctx.add_artifact(path, steps=...)``)."""


def test_backend_code_never_mentions_the_selection_settings():
    package = Path(rlprof_torch.__file__).parent
    offending = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(package.glob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SELECTION_WORDS.search(line)
    ]
    assert offending == []
