"""Small modules named for one concept (STYLE.md 12): no module of the integrations layer grows past
:data:`MAX_LINES`, where two concepts (a training profiler and a replica's, a participant and its
files) start sharing one file. Issue 43 split the two that had (``verl/dist_profiler.py``, 646+ lines;
``engines/replica.py``, 583)."""

from __future__ import annotations

from pathlib import Path

INTEGRATIONS = Path(__file__).resolve().parents[2] / "core" / "rlprof" / "integrations"
MAX_LINES = 450


def test_no_integration_module_is_over_the_limit():
    sizes = {str(p.relative_to(INTEGRATIONS)): len(p.read_text().splitlines()) for p in sorted(INTEGRATIONS.rglob("*.py"))}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines under core/rlprof/integrations (split by concept): {over}"
