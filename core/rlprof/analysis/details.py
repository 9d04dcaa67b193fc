"""Per-file details from backends in ``rlprof report`` (the ``rlprof.report_details`` entry points).

A backend distribution registers ``<backend name> = module:function`` in the group; the function
takes a file's path and returns lines to print under it (rlprof-nsys: an NVTX summary from ``nsys
stats``). The report calls it only for files still on disk; an entry point that fails to import or a
function that raises gives one "details unavailable" line, never a broken report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from rlprof.analysis.runs import RunReport

DETAILS_GROUP = "rlprof.report_details"
"""Entry-point group: ``<backend name> = module:function``, ``function(path) -> list[str]``."""


def add_details(reports: Sequence[RunReport], *, warn: Callable[[str], None] | None = None) -> None:
    """Ask each file's backend for detail lines through the ``rlprof.report_details`` entry points.

    Only backends that registered a function are asked, only for files still on disk; a function
    that fails to import or raises gives one line saying so instead of breaking the report."""
    from importlib import metadata

    points = {ep.name: ep for ep in metadata.entry_points(group=DETAILS_GROUP)}
    wanted = {f.backend for r in reports for f in r.files if f.exists} & set(points)
    functions: dict[str, Any] = {}
    for name in sorted(wanted):
        try:
            functions[name] = points[name].load()
        except Exception as exc:  # a broken plugin must not break the report
            functions[name] = f"details unavailable: {points[name].value} failed to import: {type(exc).__name__}: {exc}"
            if warn:
                warn(f"rlprof report: {DETAILS_GROUP} entry point {name} = {points[name].value} failed to import: {exc}")
    for report in reports:
        for f in report.files:
            func = functions.get(f.backend)
            if func is None or not f.exists:
                continue
            if isinstance(func, str):
                f.details = [func]
                continue
            try:
                f.details = [str(line) for line in (func(Path(f.path)) or [])]
            except Exception as exc:
                f.details = [f"details unavailable: {type(exc).__name__}: {exc}"]
