"""The core's layers, written down as a test (docs/architecture.md).

Every ``import`` in ``core/rlprof`` — at module level or inside a function, where a hidden circle
would otherwise live — must point at its own layer or one below it:

    leaves  <-  config  <-  runtime  <-  integrations  <-  top (cli, demo, testing, faces)
    leaves  <-  analysis                                <-  top

and the modules must not import one another in a circle.

The plugins under ``plugins/`` (one distribution each) sit outside the layers: a plugin's modules may import
their own package, and of rlprof only the backend API (``rlprof.backend_api``) and the names DESIGN.md keeps in
place (``rlprof`` for ``rlprof.hookimpl``, ``rlprof.errors``, ``rlprof.layout``, ``rlprof.testing``); nor may
they import one another in a circle. Their tests are left out: a test may look inside the core.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"
LEAVES = {"rlprof.errors", "rlprof.roles", "rlprof.manifest", "rlprof.hookspecs", "rlprof.context",
          "rlprof.tool_config", "rlprof.layout", "rlprof.installed", "rlprof.notices", "rlprof.plugins",
          "rlprof.invocation", "rlprof.env_seconds", "rlprof.noise", "rlprof.step_metrics",
          "rlprof.priority", "rlprof.intervals", "rlprof.row_model", "rlprof.sizes", "rlprof.hook_values",
          "rlprof.hook_docs", "rlprof.request_records", "rlprof.request_figures", "rlprof.peak", "rlprof.mfu",
          "rlprof.model_flops", "rlprof.step_work"}
MAY_IMPORT = {
    "leaf": {"leaf"},
    "config": {"leaf", "config"},
    "runtime": {"leaf", "config", "runtime"},
    "integrations": {"leaf", "config", "runtime", "integrations"},
    "analysis": {"leaf", "analysis"},
    "top": {"leaf", "config", "runtime", "integrations", "analysis", "top"},
}


def layer_of(module: str) -> str:
    if module in LEAVES or module.rpartition(".")[0] in LEAVES:  # a leaf, or a module of a leaf package (layout)
        return "leaf"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("config", "runtime", "integrations", "analysis"):
        return parts[1]
    return "top"  # rlprof itself, cli, demo, testing and the user faces rlprof.ray / rlprof.verl


def module_files(root: Path = CORE) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "rlprof").rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports_of(name: str, path: Path, known: set[str], prefix: str = "rlprof.") -> set[str]:
    """Every rlprof module ``path`` imports, wherever the import statement stands (``prefix``: the top-level names
    that count, ``rlprof.``; ``rlprof`` for a plugin's, which counts its own package too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t == "rlprof" or t.startswith(prefix))
    found.discard(name)
    return {t if t in known else t.rpartition(".")[0] for t in found}


def import_graph(root: Path = CORE) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def violations(graph: dict[str, set[str]]) -> list[str]:
    return [f"{name} ({layer_of(name)}) imports {target} ({layer_of(target)})"
            for name, targets in sorted(graph.items()) for target in sorted(targets)
            if layer_of(target) not in MAY_IMPORT[layer_of(name)]]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import circles between modules (a package importing its own submodules does not count)."""
    found, state, stack = [], {}, []

    def visit(node: str) -> None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if node == "rlprof" and target.startswith(node + "."):
                continue  # the package itself: its lazy faces (rlprof.Profiler) name modules every layer imports it from
            if state.get(target) == "open":
                found.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def test_every_import_points_down_the_layers():
    assert violations(import_graph()) == []


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_layer_test_catches_analysis_importing_runtime(tmp_path):
    """The rule bites: a copy of the core where the report imports the session fails it."""
    import shutil

    shutil.copytree(CORE / "rlprof", tmp_path / "rlprof")
    report = tmp_path / "rlprof" / "analysis" / "report.py"
    report.write_text(report.read_text() + "\n\ndef _late():\n    from rlprof.runtime.session import join\n")
    assert violations(import_graph(tmp_path)) == [
        "rlprof.analysis.report (analysis) imports rlprof.runtime.session (runtime)"]


def test_the_layer_test_catches_a_circle_hidden_in_a_function(tmp_path):
    import shutil

    shutil.copytree(CORE / "rlprof", tmp_path / "rlprof")
    errors = tmp_path / "rlprof" / "layout" / "paths.py"
    errors.write_text(errors.read_text() + "\n\ndef _late():\n    from rlprof.manifest import read_records\n")
    assert any("rlprof.layout.paths" in c and "rlprof.manifest" in c for c in circles(import_graph(tmp_path)))


@pytest.mark.parametrize("face", ["rlprof.ray", "rlprof.verl"])
def test_user_faces_stay_thin(face):
    """``rlprof.ray`` and ``rlprof.verl`` re-export the integrations; they hold no logic of their own."""
    files = module_files()
    path = files[face]
    tree = ast.parse(path.read_text())
    kinds = {type(node).__name__ for node in tree.body}
    assert kinds <= {"Expr", "ImportFrom", "Import", "Assign", "FunctionDef"}, kinds


# ----------------------------------------------------------------------------------- the plugins

PLUGINS = CORE.parent / "plugins"
PLUGIN_MAY_IMPORT = ("rlprof", "rlprof.backend_api", "rlprof.errors", "rlprof.layout", "rlprof.testing")
"""What a plugin's module may import of rlprof (and any module under ``rlprof.testing``)."""


def plugin_graph(root: Path = PLUGINS) -> dict[str, set[str]]:
    """Every plugin module (its tests left out) -> the modules it imports, of rlprof and of plugins, wherever the
    import statement stands; ``from rlprof.layout import open_file`` counts as ``rlprof.layout``."""
    files = {}
    for package in sorted(root.glob("*/rlprof_*")):
        for path in sorted(package.rglob("*.py")):
            if "tests" in path.relative_to(package).parts:
                continue
            name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
            files[name.removesuffix(".__init__")] = path
    known = set(files) | set(module_files())
    return {name: imports_of(name, path, known, prefix="rlprof") for name, path in files.items()}


def plugin_violations(graph: dict[str, set[str]]) -> list[str]:
    return [f"{name} imports {target}" for name, targets in sorted(graph.items()) for target in sorted(targets)
            if target.split(".")[0] == "rlprof" and target not in PLUGIN_MAY_IMPORT
            and not target.startswith("rlprof.testing.")]


def test_plugins_import_only_the_backend_api_and_the_kept_names():
    graph = plugin_graph()
    assert {"rlprof_torch.backend", "rlprof_nsys.backend", "rlprof_npu.backend", "rlprof_msprobe.backend"} <= set(graph)
    assert plugin_violations(graph) == []


def test_no_import_circles_in_the_plugins():
    """rlprof-npu's analyse.py and backend.py imported each other (through ARTIFACT_KIND) until issue 47."""
    assert circles(plugin_graph()) == []


def test_the_plugin_rules_bite(tmp_path):
    """A copy of the plugins where the torch backend reaches into the analysis, and npu's circle is back."""
    import shutil

    shutil.copytree(PLUGINS, tmp_path / "plugins", ignore=shutil.ignore_patterns("tests", "*.so", "build", "*.egg-info"))
    backend = tmp_path / "plugins" / "torch" / "rlprof_torch" / "backend.py"
    backend.write_text(backend.read_text() + "\n\ndef _late():\n    from rlprof.analysis.breakdown import split\n")
    capture = tmp_path / "plugins" / "npu" / "rlprof_npu" / "capture.py"
    capture.write_text(capture.read_text() + "\n\ndef _late():\n    from .backend import NpuBackend\n")
    graph = plugin_graph(tmp_path / "plugins")
    assert plugin_violations(graph) == ["rlprof_torch.backend imports rlprof.analysis.breakdown"]
    assert any("rlprof_npu.capture" in c and "rlprof_npu.backend" in c for c in circles(graph))
