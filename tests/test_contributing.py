"""docs/contributing.md names every test that depends on time (the ``timing`` marker) and only those, each
with ``(slow)`` exactly where it is in the slow tier: read from the test files' decorators, without
collecting the suite."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "contributing.md"


def _marks(node: ast.AST) -> set[str]:
    """The ``pytest.mark.<name>`` marks a decorator list or a ``pytestmark`` value holds."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Attribute) and sub.value.attr == "mark":
            found.add(sub.attr)
    return found


def marked_timing() -> dict[str, bool]:
    """``path::test`` -> whether it is slow, for every test function marked ``timing``."""
    found = {}
    for path in sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("plugins/*/tests/**/test_*.py")]):
        tree = ast.parse(path.read_text(), str(path))
        module = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
                module |= _marks(node.value)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                marks = module | set().union(*(_marks(d) for d in node.decorator_list))
                if "timing" in marks:
                    found[f"{path.relative_to(ROOT)}::{node.name}"] = "slow" in marks
    return found


def listed() -> dict[str, bool]:
    """``path::test`` -> whether the doc says ``(slow)``, from its list of timing tests."""
    text = DOC.read_text().split("The timing tests", 1)[1]
    found = {}
    for line in text.splitlines():
        match = re.match(r"- `([^`]+)`: (.+)$", line)
        if match:
            for name, slow in re.findall(r"`(test_\w+)`( \(slow\))?", match[2]):
                found[f"{match[1]}::{name}"] = bool(slow)
    return found


def test_the_doc_lists_every_timing_test_and_says_which_are_slow():
    marked, said = marked_timing(), listed()
    assert len(marked) > 40  # the reader finds them: they are not all gone
    assert sorted(set(marked) - set(said)) == [], "marked timing, not in docs/contributing.md"
    assert sorted(set(said) - set(marked)) == [], "in docs/contributing.md, not marked timing"
    assert {k: v for k, v in marked.items() if said[k] != v} == {}, "(slow) where the test is not slow, or missing"
