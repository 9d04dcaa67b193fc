"""The trainer's unprofiled steps, timed where the trainer runs, so the report sets the profiled steps beside them.

verl's trainer tells its workers about profiled steps only (``start_profile``/``stop_profile``), so no
worker's Profiler sees the other steps. But its ``fit`` calls ``_start_profiling``
at the top of every step and ``_stop_profiling`` at its end, profiled or not (:data:`TRAINERS`). Wherever verl's
trainer module is imported (:func:`watch`), the drop-in wraps both and, for a step that is not in
``global_profiler.steps``, writes its wall time, from the first call to the end of the second (the span a
profiled step's own ``step`` record covers on the workers), as an ``unprofiled_steps`` record of the
manifest of the process running the trainer (verl's ``main_ppo`` runs it in a ``TaskRunner`` actor, not
in the driver): ``manifest/controller-<host>-<pid>.jsonl``, rank None, as the Ray controller writes them
(:func:`rlprof.manifest.plain_steps_record`). An unprofiled step costs two clock reads and one line.

Nothing is timed when profiling is off (no tool or no steps) or when the run id is not known.

The same two calls are the windows of the run's step metrics (every step, profiled or not, when some role
is timed: :mod:`rlprof.integrations.verl.step_metrics`), whose book is made with the trainer's first step.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

from rlprof.config.values import DEFAULT_SAVE_PATH
from rlprof.integrations.verl import on_import, step_metrics
from rlprof.integrations.verl.run_id import shared_run_id
from rlprof.integrations.verl.sections import field, plain
from rlprof.layout import MANIFEST_DIR, ensure_dir, hostname
from rlprof.manifest import ManifestWriter, plain_steps_record
from rlprof.runtime.run_id import run_id_for

log = logging.getLogger("rlprof")

TRAINERS = {
    "verl.trainer.ppo.ray_trainer": "RayPPOTrainer",  # trainer.use_v1=false
    "verl.trainer.ppo.v1.trainer_base": "PPOTrainer",  # trainer.use_v1=true: its trainers derive from it
}
"""verl's trainer classes (module -> class) whose ``_start_profiling``/``_stop_profiling`` run every step."""


def watch() -> None:
    """Wrap each trainer's two per-step calls once its module is imported (never imported here)."""
    on_import.patch_classes(TRAINERS, wrap)


def forget() -> None:
    """Leave the trainers as verl wrote them (``rlprof.verl.uninstall``)."""
    on_import.unpatch_classes(TRAINERS, unwrap)


def wrap(trainer: Any) -> None:
    """Time the unprofiled steps of ``trainer`` (a class; wrapped once)."""
    if trainer is None or getattr(trainer._start_profiling, "rlprof_wrapped", False):
        return
    start, stop = trainer._start_profiling, trainer._stop_profiling

    @functools.wraps(start)
    def _start_profiling(self, *args: Any, **kwargs: Any) -> Any:
        timer = StepTimer.of(self)
        profiled = _profiled(self, args)
        # asked every step (a request may land on a planned step, which is profiled anyway, merged runs included)
        if timer.unplanned(self.global_steps) and not profiled and self.global_steps not in timer.profiled:
            profiled, args = True, _profiling(self, args)
            timer.captured = self.global_steps
        timer.begin(self.global_steps, profiled)
        return start(self, *args, **kwargs)

    @functools.wraps(stop)
    def _stop_profiling(self, *args: Any, **kwargs: Any) -> Any:
        timer = StepTimer.of(self)
        if timer.captured == self.global_steps:
            args = _profiling(self, args)
        try:
            return stop(self, *args, **kwargs)
        finally:
            timer.end(self.global_steps)

    _start_profiling.rlprof_wrapped = _stop_profiling.rlprof_wrapped = True
    trainer._start_profiling, trainer._stop_profiling = _start_profiling, _stop_profiling


def _profiled(trainer: Any, args: tuple) -> bool:
    """The step verl's trainer begins is profiled: the legacy trainer's ``do_profile`` argument, the v1
    trainer's ``curr_step_profile``."""
    if args:
        return bool(args[0])
    return bool(getattr(trainer, "curr_step_profile", False))


def _profiling(trainer: Any, args: tuple) -> tuple:
    """The trainer's arguments (or state) saying "this step is profiled": the legacy trainer's ``do_profile``
    argument, the v1 trainer's ``curr_step_profile`` (which its ``_stop_profiling`` reads too)."""
    if args:
        return (True, *args[1:])
    trainer.curr_step_profile = True
    return args


def unwrap(trainer: Any) -> None:
    """Put ``trainer``'s own two calls back."""
    for name in ("_start_profiling", "_stop_profiling"):
        method = getattr(trainer, name, None)
        if getattr(method, "rlprof_wrapped", False):
            setattr(trainer, name, method.__wrapped__)


def _decider(config: Any, save_path: Any, shared: str | None, metrics: Any) -> Any:
    """The decider of an armed run whose trainer is the driver (None: not armed, or no run id shared)."""
    if not shared:
        return None
    try:
        from rlprof.config import load_config
        from rlprof.runtime.plan import armed

        loaded = load_config(config)
        if not armed(loaded):
            return None
        from rlprof.runtime.plan import armed_mode
        from rlprof.runtime.unplanned import Decider

        decider = Decider(Path(save_path or DEFAULT_SAVE_PATH).absolute() / run_id_for(shared), loaded.global_.trigger,
                          tools=loaded.global_.tools, mode=armed_mode(loaded), planned=loaded.global_.steps or ())
        decider.book = metrics.book if metrics is not None else None
        return decider
    except Exception as exc:  # never the run's failure: it goes on without unplanned captures
        log.warning("rlprof: rlprof capture and triggers cannot reach this run (%s: %s)", type(exc).__name__, exc)
        return None


def fit_ended(trainer: Any) -> None:
    """verl's ``fit`` returned: the run's profiling is over, so every process of it finalizes now, while verl's
    actors are alive, and the trainer waits until each said so (:func:`run_signals.finish_run`: at most
    ``RLPROF_VERL_FINALIZE_WAIT_S``, 30 s; at once where all are finalized already), as the fully async trainer's
    end does. Without this, a run whose last profiled step never came (an armed run with nothing planned,
    captured on request or by a trigger; a plan naming steps past the last one trained) was finalized only by the
    driver's exit signal, after the trainer's task had returned and Ray had ended the actors it owned: its closing
    line said "0 of 2 profiling processes finalized" after a 30 s wait. And without the wait a replica still
    writing its last capture was ended with it: verl's V1 colocate_async trainer ends a replica's profiled step at
    the weight sync that ends the step, and a short last step after it left the export no time ("1 of 2 profiling
    processes finalized", that step's replica capture lost). The wait is after the training, never in a step."""
    timer = getattr(trainer, "__dict__", {}).get("_rlprof_steps")
    if timer is None or not timer.run_id:
        return
    if timer.decider is not None:  # an armed run: what its unplanned captures came to, or why none
        timer.decider.stop()
    from rlprof.integrations.verl import run_signals

    run_signals.finish_run([timer.run_id])


class StepTimer:
    """One trainer's unprofiled steps (see the module doc); made at its first step."""

    clock_ns = staticmethod(time.time_ns)
    """The workers' ``step`` records use the same clock."""

    def __init__(self, config: Any):
        profiler = field(config, "global_profiler")
        steps, tool = field(profiler, "steps"), field(profiler, "tool")
        self.profiled = frozenset(int(s) for s in (plain(steps) or ())) if tool else frozenset()
        shared = shared_run_id()
        self.run_dir = (Path(field(profiler, "save_path") or DEFAULT_SAVE_PATH).absolute() / run_id_for(shared)
                        if self.profiled and shared else None)  # the directory the workers' Profilers write in
        self._open: tuple[int, int] | None = None
        self._began: tuple[int, int, bool] | None = None
        self._manifest: ManifestWriter | None = None
        self.metrics = None
        """The run's step metrics (:class:`rlprof.integrations.verl.step_metrics.TrainerMetrics`) when some
        role is timed on every step; its ``book`` is told each step's window here."""
        if shared and step_metrics.timed(config):
            run_dir = Path(field(profiler, "save_path") or DEFAULT_SAVE_PATH).absolute() / run_id_for(shared)
            self.metrics = step_metrics.TrainerMetrics.open(config, run_dir, run_id_for(shared))
            step_metrics.ACTIVE = self.metrics
        self.run_id = run_id_for(shared) if shared else None
        self._window: int | None = None
        """The step between ``_start_profiling`` and ``_stop_profiling`` now, else None."""
        self._phase: int | None = None
        """The step whose verl ``step`` phase runs now, else None (:meth:`phase_began`)."""
        self.captured: int | None = None
        """The step captured unplanned now (its ``_stop_profiling`` must stop the workers' capture too)."""
        self.decider = _decider(config, field(profiler, "save_path"), shared, self.metrics)
        """The trainer's :class:`~rlprof.runtime.unplanned.Decider` (an armed run; the trainer is the driver)."""

    @classmethod
    def of(cls, trainer: Any) -> "StepTimer":
        timer = trainer.__dict__.get("_rlprof_steps")
        if timer is None:
            timer = trainer._rlprof_steps = cls(trainer.config)
        return timer

    def unplanned(self, step: int) -> bool:
        """Whether the trainer's decider captures ``step`` though no plan named it; if so, every worker and
        replica is told why (:func:`run_signals.publish_reason`) before the trainer starts their profiling."""
        if self.decider is None:
            return False
        reason = self.decider.decide(int(step))
        if reason is None:
            return False
        from rlprof.integrations.verl import run_signals

        run_signals.publish_reason(self.run_id, step, reason)
        return True

    def begin(self, step: int, profiled: bool = False) -> None:
        self._began = (step, self.clock_ns(), profiled)
        self._window = step
        if self.metrics is not None:
            self.metrics.book.began(int(step), self.clock_ns(), profiled)
        if self.run_dir is not None and step not in self.profiled:
            self._open = (step, self.clock_ns())

    def phase_began(self, step: int, start_ns: int) -> None:
        """verl's ``step`` phase began (:mod:`rlprof.integrations.verl.phases`): the step's window in the step
        metrics is the union of that phase and ``_start_profiling``..``_stop_profiling`` (the book takes the earliest
        start and the latest end; each side ends the window only when the other is not open around it)."""
        self._phase = step
        if self.metrics is not None:
            self.metrics.book.began(int(step), start_ns)

    def phase_ended(self, step: int, end_ns: int) -> None:
        self._phase = None
        if self.metrics is not None and self._window != step:
            self.metrics.book.ended(int(step), end_ns)

    def end(self, step: int) -> None:
        self._window = None
        if self.metrics is not None:
            if self._phase != step:
                self.metrics.book.ended(int(step), self.clock_ns())
            else:  # verl's step phase goes on (V1: on_step_end's weight sync): no worker times a region of it
                self.metrics.book.calls_ended(int(step), self.clock_ns())
        if self.decider is not None and self._began is not None and self._began[0] == step:
            self.decider.step_ended(int(step), (self.clock_ns() - self._began[1]) / 1e9,
                                    captured=self._began[2] or self.captured == step)
        if self.captured == step:
            self.captured = None
        opened, self._open = self._open, None
        if opened is None or opened[0] != step:
            return
        self.write("unprofiled_steps", **plain_steps_record([(step, opened[1], self.clock_ns())]))

    def write(self, record_type: str, **fields: Any) -> None:
        """One record of the trainer's own (rank None) in its controller manifest; nothing when the run
        is not profiled. verl's fully async trainer writes its ``staleness`` here too."""
        if self.run_dir is None:
            return
        if self._manifest is None:
            host, pid = hostname(), os.getpid()
            ensure_dir(self.run_dir / MANIFEST_DIR, self.run_dir)
            self._manifest = ManifestWriter(self.run_dir / MANIFEST_DIR / f"controller-{host}-{pid}.jsonl",
                                            {"run": self.run_dir.name, "rank": None, "host": host, "pid": pid},
                                            root=self.run_dir)
        self._manifest.write(record_type, **fields)
