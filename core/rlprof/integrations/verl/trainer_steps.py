"""The trainer's unprofiled steps, timed in the driver, so the report sets the profiled steps beside them.

verl's trainer tells its workers about profiled steps only (``start_profile``/``stop_profile``), so no
worker's Profiler sees the other steps. But ``RayPPOTrainer.fit`` calls ``_start_profiling(do_profile)``
at the top of every step and ``_stop_profiling(do_profile)`` at its end, profiled or not. In the driver,
the drop-in wraps both (:func:`watch`, once the trainer's module is imported) and, for a step that is not
in ``global_profiler.steps``, writes its wall time, from the first call to the end of the second (the span
a profiled step's own ``step`` record covers on the workers), as an ``unprofiled_steps`` record of the
driver's manifest, ``manifest/controller-<host>-<pid>.jsonl`` (rank None, as the Ray controller writes
them; :func:`rlprof.manifest.plain_steps_record`). An unprofiled step costs two clock reads and one line.

Nothing is timed when profiling is off (no tool or no steps) or when the run id is not known.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

from rlprof.config.values import DEFAULT_SAVE_PATH
from rlprof.integrations.verl import on_import
from rlprof.integrations.verl.run_id import shared_run_id
from rlprof.integrations.verl.sections import field, plain
from rlprof.layout import hostname
from rlprof.manifest import ManifestWriter, plain_steps_record

log = logging.getLogger("rlprof")

MODULE = "verl.trainer.ppo.ray_trainer"


def watch() -> None:
    """Wrap the trainer's two per-step calls once its module is imported (never imported here)."""
    on_import.when_imported(MODULE, patch)


def patch(module: Any) -> None:
    trainer = getattr(module, "RayPPOTrainer", None)
    if trainer is None or getattr(trainer._start_profiling, "rlprof_wrapped", False):
        return
    start, stop = trainer._start_profiling, trainer._stop_profiling

    @functools.wraps(start)
    def _start_profiling(self, *args: Any, **kwargs: Any) -> Any:
        StepTimer.of(self).begin(self.global_steps)
        return start(self, *args, **kwargs)

    @functools.wraps(stop)
    def _stop_profiling(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return stop(self, *args, **kwargs)
        finally:
            StepTimer.of(self).end(self.global_steps)

    _start_profiling.rlprof_wrapped = _stop_profiling.rlprof_wrapped = True
    trainer._start_profiling, trainer._stop_profiling = _start_profiling, _stop_profiling


def unpatch(module: Any) -> None:
    """Put the trainer's own two calls back (``rlprof.verl.uninstall``)."""
    trainer = getattr(module, "RayPPOTrainer", None)
    for name in ("_start_profiling", "_stop_profiling"):
        method = getattr(trainer, name, None)
        if getattr(method, "rlprof_wrapped", False):
            setattr(trainer, name, method.__wrapped__)


class StepTimer:
    """One trainer's unprofiled steps (see the module doc); made at its first step."""

    clock_ns = staticmethod(time.time_ns)
    """The workers' ``step`` records use the same clock."""

    def __init__(self, config: Any):
        profiler = field(config, "global_profiler")
        steps, tool = field(profiler, "steps"), field(profiler, "tool")
        self.profiled = frozenset(int(s) for s in (plain(steps) or ())) if tool else frozenset()
        run_id = shared_run_id()
        self.run_dir = (Path(field(profiler, "save_path") or DEFAULT_SAVE_PATH).absolute() / run_id
                        if self.profiled and run_id else None)
        self._open: tuple[int, int] | None = None
        self._manifest: ManifestWriter | None = None

    @classmethod
    def of(cls, trainer: Any) -> "StepTimer":
        timer = trainer.__dict__.get("_rlprof_steps")
        if timer is None:
            timer = trainer._rlprof_steps = cls(trainer.config)
        return timer

    def begin(self, step: int) -> None:
        if self.run_dir is not None and step not in self.profiled:
            self._open = (step, self.clock_ns())

    def end(self, step: int) -> None:
        opened, self._open = self._open, None
        if opened is None or opened[0] != step:
            return
        if self._manifest is None:
            host, pid = hostname(), os.getpid()
            self._manifest = ManifestWriter(self.run_dir / "manifest" / f"controller-{host}-{pid}.jsonl",
                                            {"run": self.run_dir.name, "rank": None, "host": host, "pid": pid},
                                            root=self.run_dir)
        self._manifest.write("unprofiled_steps", **plain_steps_record([(step, opened[1], self.clock_ns())]))
