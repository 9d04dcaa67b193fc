"""msprobe's ``PrecisionDebugger``, one per process: rlprof's one handle on it.

msprobe makes its debugger a process-wide singleton: the first ``PrecisionDebugger(config_path=...)``
of a process fixes the config, later constructions return that same object, and ``start``/``stop``/
``step`` are class methods acting on it. So this module keeps the one :data:`PROCESS` handle for
every backend instance of the process (colocated roles share one backend; two Profilers made one
after another in a test share the process), and it says so instead of pretending otherwise:

* one region is dumped at a time: a region entered while another is being dumped (a nested region,
  a colocated role's region inside another's) cannot be dumped, and its caller is told why;
* one config per process: a region whose ``config_path`` differs from the one the debugger was made
  with cannot be dumped (msprobe would silently use the first).

Each dump goes to its own directory: the debugger's ``dump_path`` is switched before every ``start``
(verl does the same), and ``step`` after every ``stop`` writes the region's ``dump.json`` and moves
msprobe's own counter on. msprobe is imported at the first dump (it costs seconds and patches torch
APIs), never at import or validation.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class ProcessDebugger:
    """The process's msprobe debugger: made at the first dump, then reused."""

    def __init__(self) -> None:
        self._debugger: Any = None
        self._config_path: str | None = None
        """The config the debugger was made with (msprobe keeps the first for the whole process)."""
        self._import_problem: str | None = None
        self.dumping: str | None = None
        """The region being dumped now, or None."""

    def problem(self, config_path: str) -> str | None:
        """Why a region with ``config_path`` cannot be dumped now, or None."""
        if self.dumping is not None:
            return f"msprobe dumps one region at a time per process and is dumping {self.dumping}"
        if self._debugger is not None and os.path.abspath(config_path) != self._config_path:
            return (f"msprobe's PrecisionDebugger is one per process and was made with {self._config_path!r}; "
                    f"this role's config_path {config_path!r} cannot apply in the same process")
        if self._import_problem is not None:
            return self._import_problem
        return None

    def start(self, region: str, config_path: str, module: Any, dump_path: Path) -> None:
        """Dump ``module`` into ``dump_path`` until :meth:`stop`. Raises what msprobe raises (a model
        that is no ``torch.nn.Module``, a config it refuses); then nothing is being dumped."""
        debugger_class = self._class()
        if self._debugger is None:
            self._debugger = debugger_class(config_path=config_path, dump_path=str(dump_path))
            self._config_path = os.path.abspath(config_path)
        self._debugger.service.config.dump_path = str(dump_path)
        debugger_class.start(model=module)
        self.dumping = region

    def stop(self) -> None:
        """End the dump :meth:`start` began: msprobe writes its ``dump.json`` and counts a step."""
        if self.dumping is None:
            return
        self.dumping = None
        debugger_class = self._class()
        debugger_class.stop()
        debugger_class.step()

    def _class(self) -> Any:
        try:
            from msprobe.pytorch import PrecisionDebugger
        except Exception as exc:  # any failure of the import: msprobe is absent or broken here
            self._import_problem = f"msprobe cannot be imported: {type(exc).__name__}: {exc}"
            raise
        return PrecisionDebugger


PROCESS = ProcessDebugger()
"""The one handle of this process (msprobe's debugger is one per process; see the module docstring)."""
