"""Small modules named for one concept (STYLE.md 12): no source module of the core or of a plugin grows past
:data:`MAX_LINES` (issue 47 split the eleven that had: layout, session, manifest, testing/scenario, profiler,
testing/contract, html, runs, capture_machine, hookspecs, anatomy; and breakdown_files, which did six jobs in
485), and none of the integrations layer past :data:`MAX_INTEGRATION_LINES`, where two concepts (a training
profiler and a replica's, a participant and its files) start sharing one file (issue 43 split
``verl/dist_profiler.py``, 646+ lines, and ``engines/replica.py``, 583)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INTEGRATIONS = ROOT / "core" / "rlprof" / "integrations"
MAX_LINES = 500
MAX_INTEGRATION_LINES = 450


def sources() -> list[Path]:
    """Every module of the core and of the plugins (their tests left out)."""
    found = sorted((ROOT / "core" / "rlprof").rglob("*.py"))
    return found + sorted(p for p in (ROOT / "plugins").rglob("*.py") if "tests" not in p.relative_to(ROOT / "plugins").parts)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_of_the_core_or_a_plugin_is_over_the_limit():
    over = {str(p.relative_to(ROOT)): lines(p) for p in sources() if lines(p) > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines under core/ or plugins/ (split them by concept): {over}"


def test_the_limit_reads_every_core_and_plugin_module():
    names = {str(p.relative_to(ROOT)) for p in sources()}
    assert {"core/rlprof/runtime/session.py", "plugins/torch/rlprof_torch/backend.py",
            "plugins/nsys/rlprof_nsys/backend.py", "core/rlprof/layout/paths.py"} <= names
    assert not any("/tests/" in name for name in names)


def test_no_integration_module_is_over_the_limit():
    sizes = {str(p.relative_to(INTEGRATIONS)): lines(p) for p in sorted(INTEGRATIONS.rglob("*.py"))}
    over = {name: n for name, n in sizes.items() if n > MAX_INTEGRATION_LINES}
    assert not over, f"modules over {MAX_INTEGRATION_LINES} lines under core/rlprof/integrations (split by concept): {over}"
