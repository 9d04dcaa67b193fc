"""torch_npu's Python API as the real wheel defines it, read with ``ast`` and never imported.

Used by ``test_npu_api_conformance.py`` to check that every name rlprof-npu (and the stand-in)
uses exists in the real package, with the arguments we pass. Resolution follows Python's own
rules for attribute access on modules: names bound in the module (``def``, ``class``,
assignments, ``from x import y``) first, then submodules. Names imported from torch_npu's compiled
extension (``torch_npu._C...``) cannot be read; for those, the members the package's own Python code
uses (``ProfilerActivity.NPU`` in profiler_interface.py) are the evidence of what exists.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = "torch_npu"
NON_LITERAL = object()
"""Default value that is an expression (``Constant.LEVEL0``): present, value not compared."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    """``positional_only``, ``positional_or_keyword``, ``var_positional``, ``keyword_only``, ``var_keyword``
    (the names of :class:`inspect.Parameter` kinds, lower-cased)."""
    has_default: bool
    default: Any = None


@dataclass(frozen=True)
class Found:
    kind: str
    """``module``, ``class``, ``function``, ``value`` or ``compiled``."""
    qualname: str
    node: Any = None
    """The ast node; for ``compiled``, the qualified name imported from the extension."""
    module: str | None = None
    method: bool = False
    """A function defined in a class body."""
    staticmethod: bool = False


class WheelApi:
    def __init__(self, wheel: Path):
        self._zip = zipfile.ZipFile(wheel)
        self._files = set(self._zip.namelist())
        self._trees: dict[str, ast.Module] = {}
        self._evidence: dict[str, set[str]] = {}

    # ------------------------------------------------------------------ modules

    def _module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self._files:
                return candidate
        return None

    def _is_compiled(self, module: str) -> bool:
        base = module.replace(".", "/")
        return module.startswith(f"{ROOT}._C") or any(
            f.startswith(base) and f.endswith(".so") and "/" not in f[len(base):] for f in self._files
        )

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self._module_file(module)
            if path is None:
                return None
            self._trees[module] = ast.parse(self._zip.read(path), filename=path)
        return self._trees[module]

    # ------------------------------------------------------------------ resolution

    def resolve(self, dotted: str, module: str | None = None) -> Found | None:
        """``torch_npu.profiler.profile`` -> what that attribute access would find; None if nothing.
        A ``()`` part means "an instance of the class before it" (its members are the class's).
        With ``module`` (a module imported by its path, e.g. ``torch_npu.npu.mstx``), ``dotted`` is
        looked up from there: ``mstx.range_start``."""
        parts = dotted.split(".")
        if module is None:
            if parts[0] != ROOT:
                return None
            module, parts = ROOT, parts[1:]
        elif self._module_file(module) is None:
            return None
        found: Found | None = Found("module", module, module=module)
        for part in parts:
            if part == "()":
                if found.kind not in ("class", "compiled"):
                    return None
                continue
            found = self.member(found, part)
            if found is None:
                return None
        return found

    def member(self, owner: Found, name: str) -> Found | None:
        if owner.kind == "module":
            return self._module_member(owner.qualname, name)
        if owner.kind == "class":
            return self._class_member(owner, name)
        if owner.kind == "compiled":
            return Found("compiled", f"{owner.qualname}.{name}", owner.node)
        return None

    def compiled_member_exists(self, found: Found) -> bool:
        """A name from the compiled extension exists when it is the imported name itself, or a
        member of it that the wheel's own Python code reads (``ProfilerActivity.NPU``)."""
        imported = found.node
        if found.qualname == imported:
            return True
        member = found.qualname[len(imported) + 1:]
        return "." not in member and member in self.compiled_members_used(imported)

    def _module_member(self, module: str, name: str) -> Found | None:
        tree = self.tree(module)
        bound = None
        if tree is not None:
            for stmt in _top_level(tree.body):
                hit = self._binding(module, stmt, name)
                if hit is not None:
                    bound = hit  # the last binding wins, as at run time
        if bound is not None:
            return bound
        sub = f"{module}.{name}"
        if self._module_file(sub) is not None:
            return Found("module", sub, module=sub)
        if self._is_compiled(sub):
            return Found("compiled", sub, sub)
        return None

    def _binding(self, module: str, stmt: ast.stmt, name: str) -> Found | None:
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return Found("class", f"{module}.{name}", stmt, module)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return Found("function", f"{module}.{name}", stmt, module)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return Found("value", f"{module}.{name}", stmt, module)
        if isinstance(stmt, ast.ImportFrom):
            source = _absolute(module, stmt, self._module_file(module))
            for alias in stmt.names:
                if (alias.asname or alias.name) != name:
                    continue
                if self._is_compiled(source) and self._module_file(source) is None:
                    return Found("compiled", f"{source}.{alias.name}", f"{source}.{alias.name}")
                return self._module_member(source, alias.name)
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname == name:
                    return Found("module", alias.name, module=alias.name)
        return None

    def _class_member(self, owner: Found, name: str) -> Found | None:
        for stmt in owner.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in stmt.decorator_list)
                return Found("function", f"{owner.qualname}.{name}", stmt, owner.module, method=True, staticmethod=static)
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return Found("value", f"{owner.qualname}.{name}", stmt, owner.module)
        for base in owner.node.bases:
            if isinstance(base, ast.Name):
                base_found = self._module_member(owner.module, base.id)
                if base_found is not None and base_found.kind == "class":
                    hit = self._class_member(base_found, name)
                    if hit is not None:
                        return hit
        return None

    # ------------------------------------------------------------------ signatures and evidence

    def parameters(self, found: Found) -> list[Param]:
        """The call signature of a function, a method as called on an instance (self dropped),
        or a class (its ``__init__`` without self)."""
        if found.kind == "class":
            init = self._class_member(found, "__init__")
            if init is None:
                return [Param("args", "var_positional", False), Param("kwargs", "var_keyword", False)]
            return _params(init.node)[1:]
        params = _params(found.node)
        return params[1:] if found.method and not found.staticmethod else params

    def compiled_members_used(self, qualname: str) -> set[str]:
        """For a class of the compiled extension (``torch_npu._C._profiler.ProfilerActivity``): every
        member the wheel's Python modules that import it by that name read (``ProfilerActivity.NPU``)."""
        if qualname not in self._evidence:
            source, _, name = qualname.rpartition(".")
            used: set[str] = set()
            for path in self._files:
                if not (path.startswith(f"{ROOT}/") and path.endswith(".py")):
                    continue
                text = self._zip.read(path).decode("utf-8", "replace")
                if source not in text or f"{name}." not in text:
                    continue
                tree = ast.parse(text)
                if not any(isinstance(n, ast.ImportFrom) and n.module == source and any(a.name == name and not a.asname for a in n.names)
                           for n in ast.walk(tree)):
                    continue
                for node in ast.walk(tree):
                    if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
                            and isinstance(node.value, ast.Name) and node.value.id == name):
                        used.add(node.attr)
            self._evidence[qualname] = used
        return self._evidence[qualname]


def _top_level(body: list[ast.stmt]):
    """Statements that bind module names, including inside if/try blocks."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _top_level(stmt.body)
            yield from _top_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            yield from _top_level(stmt.body)
            for handler in stmt.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(stmt.orelse)
            yield from _top_level(stmt.finalbody)


def _absolute(module: str, stmt: ast.ImportFrom, module_file: str | None) -> str:
    if not stmt.level:
        return stmt.module or ""
    package = module if module_file and module_file.endswith("__init__.py") else module.rpartition(".")[0]
    for _ in range(stmt.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{stmt.module}" if stmt.module else package


def _params(node: ast.FunctionDef) -> list[Param]:
    args = node.args
    out: list[Param] = []
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "positional_only" if i < len(args.posonlyargs) else "positional_or_keyword"
        out.append(_param(arg.arg, kind, default))
    if args.vararg:
        out.append(Param(args.vararg.arg, "var_positional", False))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        out.append(_param(arg.arg, "keyword_only", default))
    if args.kwarg:
        out.append(Param(args.kwarg.arg, "var_keyword", False))
    return out


def _param(name: str, kind: str, default: ast.expr | None) -> Param:
    if default is None:
        return Param(name, kind, False)
    try:
        return Param(name, kind, True, ast.literal_eval(default))
    except ValueError:
        return Param(name, kind, True, NON_LITERAL)


def accepts(params: list[Param], n_positional: int, keywords: list[str]) -> list[str]:
    """What is wrong with calling ``params`` with ``n_positional`` positional arguments and
    ``keywords``; empty when the call is valid."""
    problems = []
    positional = [p for p in params if p.kind in ("positional_only", "positional_or_keyword")]
    if n_positional > len(positional) and not any(p.kind == "var_positional" for p in params):
        problems.append(f"{n_positional} positional arguments, at most {len(positional)} accepted")
    by_keyword = {p.name for p in params if p.kind in ("positional_or_keyword", "keyword_only")}
    open_keywords = any(p.kind == "var_keyword" for p in params)
    for keyword in keywords:
        if keyword not in by_keyword and not open_keywords:
            problems.append(f"no keyword argument {keyword!r} (accepted: {', '.join(sorted(by_keyword))})")
    return problems
