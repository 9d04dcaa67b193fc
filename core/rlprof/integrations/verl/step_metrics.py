"""verl's trainer as its run's step-metrics driver, and verl's own logger as where they go.

Where: the process that runs verl's trainer (``main_ppo``'s ``TaskRunner`` actor). When a tool is set,
``global_profiler.step_metrics`` is on (the default) and some role's ``profiler.enable`` is true,
:class:`TrainerMetrics` holds the run's :class:`~rlprof.runtime.step_book.StepBook` (what triggers read:
:data:`ACTIVE`, ``.book.latest``/``.book.recent()``/``.book.version``) and the thread that takes every
worker's timings from the run's Ray mailbox (:mod:`rlprof.integrations.step_mailbox`; never a shared disk):

* each step's window is the trainer's own, from ``_start_profiling`` to ``_stop_profiling``, which
  verl's ``fit`` calls on every step, profiled or not (:mod:`rlprof.integrations.verl.trainer_steps`);
* the workers' regions (``actor_update``, ``actor_compute_log_prob``, ``ref_...``) come from every rank of
  every enabled role, on every step (:class:`rlprof.integrations.verl.dist_profiler.DistProfiler`);
* the rollout is timed here, as the trainer waits for it: verl's ``gen`` phase (``marked_timer("gen")``,
  :mod:`rlprof.integrations.verl.phases`) is the region ``rollout_generate`` of rank 0, on every step. verl
  tells a rollout replica only of profiled steps (``start_profile``), so a replica cannot time the others;
  per replica, ``rollout_generate`` is in each profiled step's capture and breakdown, and every request it
  served is a record every step (docs/engines.md, "Request records"; ``rlprof/requests/...``). The V1
  separate_async trainer's switches (:data:`PHASE_REGIONS`) are regions of rank 0 the same way;
* a V1 trainer's step (``trainer.use_v1``) calls ``_start_profiling`` inside its ``marked_timer("step")``, after
  ``on_step_begin`` (where separate_async switches its replicas back to training), and ``_stop_profiling`` before
  ``on_step_end`` (where it syncs the weights, and may switch them to rollout): the step's window is verl's own
  ``step`` phase where that holds the two calls (:meth:`~rlprof.integrations.verl.trainer_steps.StepTimer.phase_began`),
  so the tracker's step time is ``timing_s/step`` and what the step did at its edges is inside it;

**The seam: ``verl.utils.tracking.Tracking.log``.** Every logger ``trainer.logger`` lists (console,
file, wandb, mlflow, tensorboard, swanlab, clearml, ...) is fed by this one method, called by both
trainers (``RayPPOTrainer.fit``, the v1 ``PPOTrainer.fit``) once per step with the step's metrics dict and
``step=global_steps``. Wrapping it (:func:`watch`, when ``verl.utils.tracking`` is imported) adds the
``rlprof/`` figures to that dict, for that step, in every backend at once, with no copy of verl's
loop and no backend of verl's touched; a call for a step rlprof has no window for (validation before
training, step 0) is passed on unchanged. The figures are the step's as far as they arrived: the call
waits at most :data:`TRACKER_WAIT_S` for every worker's timings to pass the step's end (they are sent
every :data:`~rlprof.runtime.step_timings.FLUSH_S`, so about that plus two Ray messages where the machine
keeps up; the end of ``fit`` logs the median and longest wait), then logs what is there; the step's line
of ``step_metrics.jsonl`` is written complete regardless. In a V1 step, whose window goes on after
``_stop_profiling`` with ``on_step_end`` (no worker times a region there), it waits for the timings up to that
stop only (:meth:`~rlprof.runtime.step_book.StepBook.calls_ended`): a worker idle since then sends its next
batch only at its heartbeat, every 0.5 s, which the logger otherwise waited for. Nor does it wait for a process
that sends request records only (a replica's server, an agent-loop worker; paused, it too is heard at its
heartbeat only): the records that arrived are the step's ``rlprof/requests/`` figures there.

**A figure that arrives late** (a profiled step's split, known after its trace is analysed) is never
logged at the step it describes, which wandb would refuse as lower than one already logged: it goes with
the next step the trainer logs, under its own step key ``rlprof/split/step`` (the profiled step it
describes), so a tracker plots it against that key (``wandb.define_metric("rlprof/*", step_metric=...)``).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from pathlib import Path
from typing import Any

from rlprof.tool_config import parse_bool
from rlprof.integrations.verl import on_import
from rlprof.integrations.verl.sections import field, plain

log = logging.getLogger("rlprof")

TRACKING = "verl.utils.tracking"
"""The module of verl's ``Tracking`` (every ``trainer.logger`` backend behind one ``log(data, step)``)."""
TRACKER_WAIT_S = 1.0
"""The longest the trainer's ``Tracking.log`` of a step waits for the workers' timings to reach the step's end.
Where the machine keeps up the wait is what the last batch takes to come (4-45 ms a step in verl's CPU run);
the bound matters only for a worker that falls behind (a loaded 2-core CI machine once delivered a step's
``actor_update`` after a 0.2 s bound, so the logger's line lacked it): 1 s of the trainer's time at most, on
such a step only. ``RLPROF_TRACKER_WAIT_S`` sets another bound (:func:`tracker_wait_s`)."""
TRACKER_WAIT_ENV = "RLPROF_TRACKER_WAIT_S"
"""The environment variable that sets the logger's wait: a run that must log every figure of every step (the
suite's real verl runs set it far above any wait, so a line lacks nothing however loaded the machine is)."""
FINISH_WAIT_S = 30.0
"""The longest the end of ``fit`` waits for the last steps' timings and the last profiled steps' splits (each
worker analyses its traces once written: seconds for a large trace) before writing them; it ends as soon as
nothing is missing (the timings: a few ms), so only a worker that never answers makes the job wait it out."""
FRAMEWORK_MFU = "perf/mfu/"
"""verl's own MFU figures (``perf/mfu/actor``, ``perf/mfu/critic``, ``perf/mfu/actor_infer``)."""
ROLLOUT_PHASE = "gen"
"""verl's phase (``timing_s/gen``) timed here as the rollout's region."""
ROLLOUT_REGION = ("rollout", "rollout_generate")
PHASE_REGIONS = {
    ROLLOUT_PHASE: ROLLOUT_REGION,
    # verl 0.9.1's V1 separate_async trainer lending its own (hybrid) replicas to generation
    # (trainer.v1.separate_async.hybrid_rollout.enable_switch): its workers' switches, and its wait meanwhile
    "switch_wait": ("actor", "actor_switch_wait"),
    "switch_to_rollout": ("actor", "actor_switch_to_rollout"),
    "switch_to_trainer": ("actor", "actor_switch_to_trainer"),
}
"""verl's phases (``timing_s/<phase>``) the trainer times here as regions of rank 0, every step (the trainer's
workers hear nothing of them): the rollout as it waits for it, the V1 separate_async trainer's switches."""
ROLE_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref", "critic")
"""Where verl keeps each role's ``profiler`` section."""

ACTIVE: "TrainerMetrics | None" = None
"""This process's trainer's step metrics while its ``fit`` runs (what a trigger reads), else None."""


def tracker_wait_s() -> float:
    """The bound on the logger's wait: ``RLPROF_TRACKER_WAIT_S``, else :data:`TRACKER_WAIT_S` (a bad value is
    said once and the default used: the trainer's logging never fails because of rlprof)."""
    from rlprof.env_seconds import seconds_or_default

    return seconds_or_default(TRACKER_WAIT_ENV, TRACKER_WAIT_S, "a number of seconds >= 0", minimum=0.0)


def timed(config: Any) -> bool:
    """verl's ``config`` times some role on every step: a tool set, ``global_profiler.step_metrics`` not
    false, some role's ``profiler.enable`` true (:func:`rlprof.runtime.step_book.timed`, read from verl's config)."""
    section = field(config, "global_profiler")
    if not field(section, "tool") or not parse_bool(plain(field(section, "step_metrics", True)),
                                                     "global_profiler.step_metrics", default=True):
        return False
    for path in ROLE_SECTIONS:
        node = config
        for part in path.split("."):
            node = field(node, part)
        if field(field(node, "profiler"), "enable"):
            return True
    return False


class TrainerMetrics:
    """One trainer's step metrics (see the module doc): ``book`` is the run's
    :class:`~rlprof.runtime.step_book.StepBook`, ``collector`` its mailbox thread."""

    def __init__(self, book: Any, collector: Any):
        self.book = book
        self.collector = collector
        self.waited_s: list[float] = []
        """How long each ``Tracking.log`` waited for the step's timings (the last 1000)."""
        self.wait_s = tracker_wait_s()
        self.framework_peak: float | None = None
        """The peak verl divides its MFU by (TFLOP/s; ``inf`` for a device its table lacks), looked up once."""

    @classmethod
    def open(cls, config: Any, run_dir: Path, run_id: str) -> "TrainerMetrics | None":
        """The trainer's step metrics, or None (said once) when the run's mailbox cannot be made."""
        from rlprof.integrations.step_mailbox import Collector, open_mailbox
        from rlprof.runtime.step_book import StepBook
        from rlprof.step_metrics import FILE

        try:
            mailbox = open_mailbox(run_id)
        except Exception as exc:  # never the training's failure: it goes on without step metrics
            log.warning("rlprof: no step metrics for this run: the run's mailbox actor could not be made (%s: %s)",
                        type(exc).__name__, exc)
            return None
        tools = plain(field(field(config, "global_profiler"), "tool"))
        tools = [tools] if isinstance(tools, str) else list(tools or ())
        book = StepBook(run_dir / FILE, run_id, tools, root=run_dir)
        return cls(book, Collector(book, mailbox))

    def tracked(self, data: Any, step: Any) -> Any:
        """``data`` with the ``rlprof/`` figures of ``step`` added (a new dict; ``data`` when there are none).
        verl's own MFU figures in it (``perf/mfu/*``) are kept beside rlprof's (:meth:`keep_framework`)."""
        self.keep_framework(data, step)
        try:
            began = time.monotonic()
            extra = self.book.for_tracker(int(step), wait_s=self.wait_s)
            self.waited_s = [*self.waited_s[-999:], time.monotonic() - began]
        except Exception as exc:  # the trainer's own logging must never fail because of rlprof
            log.debug("rlprof: no step metrics for step %s: %s: %s", step, type(exc).__name__, exc)
            return data
        if not extra:
            return data
        return {**extra, **data} if isinstance(data, dict) else data

    def keep_framework(self, data: Any, step: Any) -> None:
        """verl's ``perf/mfu/*`` of ``step``, as it logs them, in a ``framework`` line of ``step_metrics.jsonl`` with
        the peak verl divides by (its table's, for this process's device: ``get_device_flops``), so the report sets
        them beside rlprof's MFU and says where they differ (docs/analysis.md, "What the compute achieves")."""
        try:
            found = {k: float(v) for k, v in data.items() if isinstance(k, str) and k.startswith(FRAMEWORK_MFU)
                     and isinstance(v, (int, float))} if isinstance(data, dict) else {}
            if not found or step is None:
                return
            if self.framework_peak is None:
                from verl.utils.flops_counter import get_device_flops

                self.framework_peak = float(get_device_flops(unit="T"))
            peak = self.framework_peak if math.isfinite(self.framework_peak) else None  # inf: a device verl lacks
            self.book.framework(int(step), found, {"source": "verl", "peak_tflops": peak,
                                                   "timing_s/update_actor": data.get("timing_s/update_actor")})
        except Exception as exc:  # the trainer's own logging must never fail because of rlprof
            log.debug("rlprof: verl's MFU of step %s not kept: %s: %s", step, type(exc).__name__, exc)

    def close(self) -> None:
        waited = sorted(self.waited_s)
        if waited:
            log.info("rlprof: verl's logger waited for the step metrics %.1f ms per step (median of %d; longest %.1f ms)",
                     waited[len(waited) // 2] * 1e3, len(waited), waited[-1] * 1e3)
        self.collector.finish(FINISH_WAIT_S)


# ------------------------------------------------------------------------------ verl's logger


def watch() -> None:
    """Wrap ``Tracking.log`` once ``verl.utils.tracking`` is imported (never imported here)."""
    on_import.when_imported(TRACKING, _patch)


def forget() -> None:
    """Leave ``Tracking.log`` as verl wrote it (``rlprof.verl.uninstall``)."""
    import sys

    on_import.forget(TRACKING)
    tracking = getattr(sys.modules.get(TRACKING), "Tracking", None)
    log_method = getattr(tracking, "log", None)
    if getattr(log_method, "rlprof_wrapped", False):
        tracking.log = log_method.__wrapped__


def _patch(module: Any) -> None:
    tracking = getattr(module, "Tracking", None)
    original = getattr(tracking, "log", None)
    if original is None or getattr(original, "rlprof_wrapped", False):
        return

    @functools.wraps(original)
    def log_with_rlprof(self: Any, data: Any, step: Any, *args: Any, **kwargs: Any) -> Any:
        metrics = ACTIVE
        if metrics is not None and step is not None:
            data = metrics.tracked(data, step)
        return original(self, data, step, *args, **kwargs)

    log_with_rlprof.rlprof_wrapped = True
    tracking.log = log_with_rlprof
