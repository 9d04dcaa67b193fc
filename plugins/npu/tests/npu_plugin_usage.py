"""Every torch_npu name rlprof-npu uses, read from the plugin's own source.

The plugin calls torch_npu only through a variable named ``torch_npu`` (the imported module is
passed around under that name). From each ``rlprof_npu/*.py`` this collects:

* every attribute chain rooted at ``torch_npu`` (``torch_npu.profiler.ProfilerLevel.Level0``);
* every call of such a chain, with its number of positional arguments and keyword names;
* calls on objects built from such a chain (``self._profile = torch_npu.profiler.profile(...)``
  then ``self._profile.stop()``), written ``torch_npu.profiler.profile.().stop``.

So the list of names to check against the real wheel has one source, the plugin's code: a new
use of torch_npu is checked the moment it is written.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = "torch_npu"


@dataclass(frozen=True)
class Use:
    chain: str
    file: str
    line: int
    call: bool = False
    positional: int = 0
    keywords: tuple[str, ...] = ()


def plugin_uses(package_dir: Path) -> list[Use]:
    uses: list[Use] = []
    for path in sorted(package_dir.glob("*.py")):
        uses.extend(_file_uses(path))
    return uses


def _file_uses(path: Path) -> list[Use]:
    tree = ast.parse(path.read_text(), filename=str(path))
    instances: dict[str, tuple[str, ...]] = {}
    """``_profile`` or ``self._profile`` -> the chain of the call that built it, plus ``()``."""

    def chain(node: ast.AST) -> tuple[str, ...] | None:
        if isinstance(node, ast.Name):
            if node.id == ROOT:
                return (ROOT,)
            return instances.get(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self" and f"self.{node.attr}" in instances:
                return instances[f"self.{node.attr}"]
            base = chain(node.value)
            return None if base is None else base + (node.attr,)
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            built = chain(node.value.func)
            if built is None:
                continue
            for target in node.targets:
                if isinstance(target, ast.Name):
                    instances[target.id] = built + ("()",)
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                    instances[f"self.{target.attr}"] = built + ("()",)

    uses: list[Use] = []
    name = path.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            found = chain(node.func)
            if found is not None and len(found) > 1:
                uses.append(Use(".".join(found), name, node.lineno, call=True, positional=len(node.args),
                                keywords=tuple(k.arg for k in node.keywords if k.arg is not None)))
        elif isinstance(node, ast.Attribute):
            found = chain(node)
            if found is not None and len(found) > 1:
                uses.append(Use(".".join(found), name, node.lineno))
    return uses
