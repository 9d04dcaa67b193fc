"""Per-file details from backends in ``rlprof report``: the ``report_details`` hook.

A backend implements ``report_details(path) -> lines`` (:func:`rlprof.hookspecs.report_details`;
rlprof-nsys: an NVTX summary from ``nsys stats``); the deprecated ``rlprof.report_details`` entry
point of the backend's name still works. The report asks only the backends of files still on disk,
loaded by the one plugin loader (:func:`rlprof.plugins.implementations`); a backend that cannot be
loaded or whose hook raises gives one "details unavailable" line, never a broken report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from rlprof import plugins
from rlprof.analysis.runs import RunReport

DETAILS_HOOK = "report_details"
"""The hook asked (``rlprof report --no-details`` skips it)."""


def add_details(reports: Sequence[RunReport], *, warn: Callable[[str], None] | None = None) -> None:
    """Ask each file's backend for detail lines (its ``report_details`` hook).

    Only backends whose files are still on disk are loaded; one that cannot be loaded gives its files
    one line saying why (and ``warn`` the loader's line naming distribution and version); a hook that
    raises gives one line instead of breaking the report."""
    wanted = {f.backend for r in reports for f in r.files if f.exists}
    if not wanted:
        return
    found, problems = plugins.implementations(DETAILS_HOOK, wanted)
    hooks = {impl.owner: impl for impl in found}
    unavailable = {}
    for name, line in problems:
        if warn:
            warn(f"rlprof report: {line}")
        unavailable[name] = f"details unavailable: {line}"
    for report in reports:
        for f in report.files:
            if not f.exists:
                continue
            if f.backend in unavailable and f.backend not in hooks:
                f.details = [unavailable[f.backend]]
                continue
            impl = hooks.get(f.backend)
            if impl is None:
                continue
            try:
                f.details = [str(line) for line in (impl.call(path=Path(f.path)) or [])]
            except Exception as exc:
                f.details = [f"details unavailable: {type(exc).__name__}: {exc}"]
