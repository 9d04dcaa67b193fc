"""verl's trainer's own phases (what it logs as ``timing_s/<name>``) in the run's manifest, on every step of a profiled run.

Why: the roles' regions say what the workers did in a step; between them verl's driver (its
``TaskRunner`` actor, which holds no Profiler) computes rewards and advantages, moves weights, runs
validation. The report showed that time only as "(outside regions)". verl's ``RayPPOTrainer.fit``
times each phase of its step with ``marked_timer(name, timing_raw)`` (``gen``, ``reward``,
``old_log_prob``, ``adv``, ``update_actor``, ``update_weights``, ``testing``, and ``step`` around
them); rlprof records the same phases, so the report can say which of them the outside time was, and,
beside the unprofiled steps' phases, which of them profiling made longer (:mod:`rlprof.analysis.cost`:
verl's weight sync waits for a replica whose profiler holds its GIL, which no other record shows).

:func:`watch` (from :func:`rlprof.integrations.verl.install.install`) patches verl's trainer modules
(:data:`TRAINERS`) when each is imported: the trainer's ``fit`` says which trainer runs in this
process, and each module's ``marked_timer`` also writes a ``phase`` record
(:func:`rlprof.manifest.phase_record`) per phase of every step of a profiled run (``global_profiler.tool``
set and ``global_profiler.steps`` not empty; about 7 short lines a step) to
``<save_path>/<run>/manifest/driver-<host>-<pid>.jsonl``. verl's timer itself runs unchanged inside,
and nothing is written for a run that profiles no step. A failure here is logged and never reaches the trainer.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from pathlib import Path
from typing import Any

from rlprof.integrations.verl import step_metrics, trainer_steps

log = logging.getLogger("rlprof")

TRAINERS = {
    "verl.trainer.ppo.ray_trainer": "RayPPOTrainer",
    "verl.trainer.ppo.v1.trainer_base": "PPOTrainer",
    "verl.trainer.ppo.v1.trainer_sync": None,
    "verl.trainer.ppo.v1.trainer_colocate_async": None,
    "verl.trainer.ppo.v1.trainer_separate_async": None,
}
"""verl 0.9.1's trainer modules -> the class whose ``fit`` runs the steps (None: the module only times
phases of the steps its base class runs). ``main_ppo``'s ``TaskRunnerV1`` runs the ``v1`` trainers."""
SOURCE = "verl timing_s"
"""What timed the phases, as the report names it."""
STEP_PHASE = "step"
"""The phase around the whole step (``timing_s/step``)."""


class _Driver:
    """This process's trainer while its ``fit`` runs, and the manifest its phases go to."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self._writer: Any = None

    def entered(self, name: str, start_ns: int) -> None:
        """The trainer's phase ``name`` began: the ``step`` phase opens the step's window in the step metrics."""
        trainer = self.trainer
        if trainer is None or name != STEP_PHASE:
            return
        try:
            trainer_steps.StepTimer.of(trainer).phase_began(int(trainer.global_steps), start_ns)
        except Exception as exc:  # the trainer's own timing must never fail because of rlprof
            log.debug("rlprof: verl's step phase not timed: %s: %s", type(exc).__name__, exc)

    def record(self, name: str, start_ns: int, end_ns: int) -> None:
        """The trainer's phase ``name`` ran from ``start_ns`` to ``end_ns``: a record when its step is profiled."""
        trainer = self.trainer
        if trainer is None:
            return
        region = step_metrics.PHASE_REGIONS.get(name)
        if region is not None and step_metrics.ACTIVE is not None:  # the rollout as the trainer waits for it; a switch
            step_metrics.ACTIVE.book.timing(0, *region, start_ns, end_ns)
        if name == STEP_PHASE:
            try:
                trainer_steps.StepTimer.of(trainer).phase_ended(int(trainer.global_steps), end_ns)
            except Exception as exc:
                log.debug("rlprof: verl's step phase not timed: %s: %s", type(exc).__name__, exc)
        try:
            step = int(trainer.global_steps)
            section = trainer.config.global_profiler
            if not section.get("tool") or not list(section.get("steps") or ()):
                return
            writer = self._writer or self._open(str(section.save_path))
            if writer is not None:
                from rlprof.manifest import PHASE_RECORD, phase_record

                writer.write(PHASE_RECORD, **phase_record(step, str(name), start_ns, end_ns, SOURCE))
        except Exception as exc:  # the trainer's own timing must never fail because of rlprof
            log.debug("rlprof: verl's phase %s not recorded: %s: %s", name, type(exc).__name__, exc)

    def _open(self, save_path: str):
        from rlprof.integrations.verl.run_id import shared_run_id
        from rlprof.layout import MANIFEST_DIR, ensure_dir, hostname
        from rlprof.manifest import ManifestWriter
        from rlprof.runtime.run_id import run_id_for

        shared = shared_run_id()
        if not shared:  # no run id the workers share: the phases could not be put beside their regions
            return None
        run_id = run_id_for(shared)
        run_dir = Path(save_path).absolute() / run_id
        ensure_dir(run_dir / MANIFEST_DIR, run_dir)
        host, pid = hostname(), os.getpid()
        self._writer = ManifestWriter(run_dir / MANIFEST_DIR / f"driver-{host}-{pid}.jsonl",
                                      {"run": run_id, "rank": None, "host": host, "pid": pid}, root=run_dir)
        return self._writer

    def close(self) -> None:
        writer, self._writer, self.trainer = self._writer, None, None
        if writer is not None:
            writer.close()


DRIVER = _Driver()


def watch() -> None:
    """Patch verl's trainer modules now if they are loaded, else right after each is imported."""
    from rlprof.integrations.verl.on_import import when_imported

    for name in TRAINERS:
        when_imported(name, patch)


def patch(module: Any) -> None:
    """Wrap ``module.marked_timer`` and the ``fit`` of its trainer class (:data:`TRAINERS`; idempotent)."""
    timer = getattr(module, "marked_timer", None)
    if timer is not None and not hasattr(timer, "_rlprof_original"):
        module.marked_timer = _recorded(timer)
    trainer = getattr(module, TRAINERS.get(module.__name__) or "RayPPOTrainer", None)
    fit = vars(trainer).get("fit") if trainer is not None else None
    if fit is not None and not hasattr(fit, "_rlprof_original"):
        trainer.fit = _running(fit)


def unpatch(module: Any) -> None:
    """Put verl's timer and ``fit`` back (``rlprof.verl.uninstall``)."""
    timer = getattr(module, "marked_timer", None)
    if hasattr(timer, "_rlprof_original"):
        module.marked_timer = timer._rlprof_original
    trainer = getattr(module, TRAINERS.get(module.__name__) or "RayPPOTrainer", None)
    fit = vars(trainer).get("fit") if trainer is not None else None
    if hasattr(fit, "_rlprof_original"):
        trainer.fit = fit._rlprof_original


def _recorded(original):
    @contextlib.contextmanager
    @functools.wraps(original)
    def marked_timer(name, timing_raw, *args, **kwargs):
        start = time.time_ns()
        DRIVER.entered(name, start)
        try:
            with original(name, timing_raw, *args, **kwargs):
                yield
        finally:
            DRIVER.record(name, start, time.time_ns())

    marked_timer._rlprof_original = original
    return marked_timer


def _running(original):
    @functools.wraps(original)
    def fit(self, *args, **kwargs):
        DRIVER.trainer = self
        try:
            return original(self, *args, **kwargs)
        finally:
            DRIVER.close()
            metrics, step_metrics.ACTIVE = step_metrics.ACTIVE, None
            if metrics is not None:  # the last steps' timings, then the file and the hook close
                metrics.close()
            trainer_steps.fit_ended(self)  # then every process of the run finalizes, its actors still alive

    fit._rlprof_original = original
    return fit
