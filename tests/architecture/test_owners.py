"""One owner per fact, written down as a test (docs/architecture.md, "Who owns what").

Each fact of the table lives in one object; everything else asks it. The test reads every module of
``core/rlprof`` and fails when a module other than the owner's *assigns* one of the names that held
the fact (``self.x = ...``, ``x: T = ...``, ``x, self.y = ...``, ``global x; x = ...``), or, for the
run id, decides it (calls ``new_run_id`` or reads ``RLPROF_RUN_ID`` from the environment). The names
listed are today's holders plus the copies the integrations kept before (``_this_step``, ``_STARTED``,
``_capture``, ``_WARNED``, ``_said``, ``_UNDECLARED_SAID``, ``_last_step``, ...), so a copy coming back
under its old name fails here. The table in the docs and :data:`FACTS` name the same facts.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core" / "rlprof"
DOC = ROOT / "docs" / "architecture.md"

FACTS: dict[str, tuple[str, frozenset[str]]] = {
    # fact (as the docs table names it): (the owner's module, the names that hold it)
    "current step of a profiling process": (
        "runtime/profiler.py", frozenset({"_step", "_this_step", "_STARTED", "_steps_started"})),
    "step number when the trainer gives none": ("runtime/profiler.py", frozenset({"_starts", "_begins"})),
    "step the Ray controller fans out": ("integrations/ray.py", frozenset({"_step", "_last_step"})),
    "open capture": ("runtime/capture_machine.py", frozenset({"open_capture", "_capture"})),
    "Profiler finalized": ("runtime/profiler.py", frozenset({"_finalized"})),
    "process session ended": ("runtime/session.py", frozenset({"finished"})),
    "what became of each Ray worker": (
        "integrations/ray_fanout.py", frozenset({"dead", "unresponsive", "_finals", "_LIVE"})),
    "said once": ("notices.py", frozenset({"_said", "_WARNED", "_UNDECLARED_SAID"})),
    "does a rollout replica profile": ("integrations/engines/replica.py", frozenset({"_usable", "_dead"})),
}
RUN_ID_OWNER = "runtime/run_id.py"
"""The one module that decides a run id (``new_run_id``/``RLPROF_RUN_ID``); everything else asks it."""


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(CORE)): ast.parse(p.read_text()) for p in sorted(CORE.rglob("*.py"))}


def _assigned_names(tree: ast.AST) -> set[tuple[str, int]]:
    """Every attribute or plain name the module assigns, with its line."""
    found: set[tuple[str, int]] = set()

    def targets(node: ast.AST):
        if isinstance(node, (ast.Tuple, ast.List)):
            for element in node.elts:
                yield from targets(element)
        elif isinstance(node, ast.Starred):
            yield from targets(node.value)
        else:
            yield node

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            nodes = [t for target in node.targets for t in targets(target)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            nodes = list(targets(node.target))
        else:
            continue
        for target in nodes:
            if isinstance(target, ast.Attribute):
                found.add((target.attr, node.lineno))
            elif isinstance(target, ast.Name):
                found.add((target.id, node.lineno))
    return found


@pytest.mark.parametrize("fact", sorted(FACTS))
def test_only_the_owner_assigns_a_fact(fact):
    """A name that holds a fact is assigned only where an owner keeps it (``_step`` is the Profiler's in a
    training process and the controller's in the driver: two facts, one owner each)."""
    owner, names = FACTS[fact]
    modules = _modules()
    assert owner in modules, f"{fact}: owner module {owner} is gone; update FACTS and docs/architecture.md"
    owners_of = {name: {o for o, held in FACTS.values() if name in held} for name in names}
    copies = [f"{module}:{line} assigns {name}" for module, tree in modules.items()
              for name, line in sorted(_assigned_names(tree)) if name in names and module not in owners_of[name]]
    assert not copies, f"{fact} is owned by {owner}; a second module keeps a copy:\n" + "\n".join(copies)


def test_only_the_run_id_owner_decides_a_run_id():
    """A run id is worked out in one place: explicit > ``RLPROF_RUN_ID`` > the Ray job (verl) > a new one."""
    offenders = []
    for module, tree in _modules().items():
        if module in (RUN_ID_OWNER, "layout/paths.py"):  # layout.new_run_id is the id's spelling, called by the owner
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "new_run_id":
                    offenders.append(f"{module}:{node.lineno} calls new_run_id()")
                if name in ("get", "getenv") and node.args and isinstance(node.args[0], ast.Constant) \
                        and node.args[0].value == "RLPROF_RUN_ID":
                    offenders.append(f"{module}:{node.lineno} reads RLPROF_RUN_ID")
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.slice, ast.Constant) and node.slice.value == "RLPROF_RUN_ID":
                offenders.append(f"{module}:{node.lineno} reads RLPROF_RUN_ID")
    assert not offenders, f"only {RUN_ID_OWNER} decides a run id:\n" + "\n".join(offenders)


def test_the_docs_table_names_every_fact_with_its_owner():
    """docs/architecture.md's "Who owns what" table and :data:`FACTS` agree, fact by fact."""
    text = DOC.read_text()
    section = text.split("## Who owns what", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    table = {fact.strip(): owner for fact, owner, _ in rows[1:]}
    for fact, (module, _) in FACTS.items():
        assert fact in table, f"docs/architecture.md's owner table lacks the fact {fact!r}"
        dotted = "rlprof." + module.removesuffix(".py").replace("/", ".")
        assert dotted in table[fact], f"{fact}: the docs name {table[fact].strip()!r}, the code's owner is {dotted}"
    assert "run id" in table and "rlprof.runtime.run_id" in table["run id"]
    assert re.search(r"\| who asks", section)
