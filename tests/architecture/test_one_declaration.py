"""Rules declared once (issue 47): a test fails where a second list of the split's parts, or of trace file
patterns, appears in the source of the core or of a plugin.

* The split's parts (compute, exposed communication, exposed memory, idle) are columns of the row model
  (:data:`rlprof.row_model.WINDOW_PARTS`, each with its name in the step metrics and its colour); everything
  else derives what it needs from there. A tuple, list, set or dict literal naming two of them (by column,
  by step-metrics name, as a fraction or as the in-run analysis' time) is a second list.
* Trace file patterns are the installed readers' (:class:`rlprof.hookspecs.TraceReader`, a backend's
  ``trace_reader`` hook): ``rlprof breakdown``, ``rlprof timeline --with-traces``, the report's hints and the
  demo's all ask the readers. A collection literal holding a reader's pattern, or a Chrome trace's file name,
  outside the ``TraceReader(...)`` that declares it (or the constant passed there) is a second list.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = (ast.Tuple, ast.List, ast.Set, ast.Dict)
CHROME_NAMES = ("trace.json", "trace.json.gz", "trace_view.json")
"""Chrome trace names as older rlprof listed them (``*.pt.trace.json.gz``, torch_npu's ``trace_view.json``)."""


def sources(root: Path = ROOT) -> list[Path]:
    """Every module of the core and the plugins, tests left out."""
    found = sorted((root / "core" / "rlprof").rglob("*.py"))
    found += sorted(p for p in (root / "plugins").rglob("*.py") if "tests" not in p.relative_to(root / "plugins").parts)
    return found


def strings(node: ast.AST) -> list[str]:
    items = list(node.keys) + list(node.values) if isinstance(node, ast.Dict) else node.elts
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def part_names() -> set[str]:
    from rlprof.row_model import PART_NAMES, WINDOW_PARTS

    names = set(WINDOW_PARTS)
    for part in PART_NAMES.values():
        names |= {part, f"{part}_frac", f"{part}_ms"}
    return names


def second_part_lists(root: Path = ROOT) -> list[str]:
    names = part_names()
    found = []
    for path in sources(root):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, COLLECTIONS) and len(set(strings(node)) & names) >= 2:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def reader_patterns() -> set[str]:
    from rlprof.analysis.trace_readers import readers

    answers, _ = readers()
    return {p for reader in answers.values() for p in (*reader.patterns, *reader.not_traces)}


def _declaring(tree: ast.AST) -> set[int]:
    """Ids of the literals a module hands to ``TraceReader(...)``: inside the call, or a constant named there."""
    passed, allowed = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "TraceReader":
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                allowed |= {id(n) for n in ast.walk(arg)}
                passed |= {n.id for n in ast.walk(arg) if isinstance(n, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in passed for t in node.targets):
            allowed |= {id(n) for n in ast.walk(node.value)}
    return allowed


def second_pattern_lists(root: Path = ROOT) -> list[str]:
    patterns = reader_patterns()
    found = []
    for path in sources(root):
        tree = ast.parse(path.read_text())
        allowed = _declaring(tree)
        for node in ast.walk(tree):
            if isinstance(node, COLLECTIONS) and id(node) not in allowed and any(
                    s in patterns or s.endswith(CHROME_NAMES) for s in strings(node)):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_the_split_s_parts_are_listed_once():
    assert second_part_lists() == [], "derive the parts from rlprof.row_model (WINDOW_PARTS, PART_NAMES, COLOURS)"


def test_trace_file_patterns_are_listed_once():
    assert reader_patterns() >= {"*.json.gz", "*.nsys-rep", "trace_view.json"}  # the installed readers answer
    assert second_pattern_lists() == [], "ask the installed readers (rlprof.analysis.traces.TraceFiles, trace_readers.claim)"


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "core" / "rlprof", tmp_path / "core" / "rlprof")
    (tmp_path / "plugins").mkdir()
    return tmp_path


def test_a_second_list_is_found(tmp_path):
    """The rules bite: a copy of the core with the colours listed again, and with a list of trace names."""
    root = _copy(tmp_path)
    html = root / "core" / "rlprof" / "analysis" / "html.py"
    html.write_text(html.read_text() + '\nCOLOURS_AGAIN = {"compute_ms": "#4c78a8", "idle_ms": "#d0d7de"}\n')
    traces = root / "core" / "rlprof" / "analysis" / "traces.py"
    traces.write_text(traces.read_text() + '\nTRACE_PATTERNS = ("*.trace.json.gz", "*.trace.json")\n')
    assert [line.split(":")[0] for line in second_part_lists(root)] == ["core/rlprof/analysis/html.py"]
    assert [line.split(":")[0] for line in second_pattern_lists(root)] == ["core/rlprof/analysis/traces.py"]
