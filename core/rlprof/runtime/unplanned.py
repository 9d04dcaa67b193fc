"""The one place that decides an unplanned capture: ``rlprof capture`` requests and triggers.

A run is armed when a tool is set and a role is enabled, whatever ``global_profiler.steps`` says
(:func:`rlprof.runtime.plan.armed`). Its driver owns one :class:`Decider` and asks it at each step start:
"capture this step? why?" (:meth:`Decider.decide`). The drivers:

* the Ray controller (:meth:`rlprof.integrations.ray.ProfilingController.start_step`), which tells every
  worker the step and its reason in the ``start_step`` it fans out;
* verl's trainer through the drop-in (:mod:`rlprof.integrations.verl`);
* a plain :class:`~rlprof.Profiler`: rank 0's decides, and the other ranks read its answers from the run
  directory (:meth:`Decider.follow`), so every rank captures the same absolute step (chosen
  :data:`AHEAD` steps on, far enough that every rank starts it after the answer is written).

What it reads:

* **requests**: ``rlprof capture RUN [--steps N]`` writes ``<run>/requests/<id>.json``; the decider polls
  that directory at step start (one ``os.stat`` of it per step, a read only when it changed), grants the
  next N steps and writes ``<id>.answer.json`` (the steps, or why it refused), which the CLI prints;
* **triggers** (``global_profiler.trigger``, :mod:`rlprof.config.trigger`): the driver feeds each step's
  time (:meth:`Decider.step_ended`) and, where step metrics reach it, each step's figures
  (:meth:`Decider.figures`); a trigger that fires grants the next step, within ``max_captures`` and
  ``cooldown_steps`` (the capture budgets then hold as for any capture).

Every grant carries the capture's reason (``requested: <id>``, ``triggered: <sentence>``), which the
capture's manifest record keeps (:class:`rlprof.manifest.CaptureRecord` ``reason``) and the report shows.
As the run ends (:meth:`Decider.stop`) the deciding driver says what its unplanned captures came to, or why
there were none ("slow_step needs 20 steps of history; this run had 14"): in its log and in an ``armed``
record (:class:`rlprof.manifest.ArmedRecord`) that the report reads.
Never raises into training: a request it cannot read is passed over (and logged once).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Sequence

from rlprof.config.trigger import Trigger
from rlprof.layout import ensure_dir
from rlprof.runtime.capture_requests import ANSWER, LISTENING, REQUESTS, write_json

log = logging.getLogger("rlprof")

SETTLE_STEPS = 2
"""Steps after a captured one that ``slow_step`` leaves out: a demo run whose request captured step 5 fired
the trigger at step 7 (1.6x the median) while step 5's trace was still being written on a 2-core machine."""
AHEAD = 2
"""How many steps on a plain Profiler's rank 0 grants a capture: the other ranks read the answer at their next
step start, and may already be one step on."""
REQUESTED, TRIGGERED, PLANNED = "requested", "triggered", "planned"


def requested(request_id: str) -> str:
    return f"{REQUESTED}: {request_id}"


@dataclass(frozen=True)
class Grant:
    steps: tuple[int, ...]
    reason: str


class Decider:
    """Decides, at each step start of one driver, whether the step is captured though no plan named it.

    :param run_dir: the run's directory on the driver's node (requests are read and answered there).
    :param trigger: ``global_profiler.trigger`` (None: none).
    :param ahead: the first step a request is granted: the step starting now plus ``ahead`` (0: a driver that
        tells every process before they start the step, as the Ray controller does).
    :param refuse: why this run cannot start a capture mid-run (a tool that must start with the process),
        or None; every request is answered with it.
    :param answers: this decider grants requests (rank 0, the controller); False: it follows the answers
        another wrote (the other ranks of a plain run).
    :param tools: the run's ``global_profiler.tool``, and ``mode`` (``e2e``, ``discrete``) its captures would have:
        what the ``armed`` record names where no process profiled.
    :param planned: the run's planned steps (``global_profiler.steps``): a request moves past them (they are
        captured anyway, and the request asked for a capture more), and the end of a run that has some speaks of
        unplanned captures only when a trigger was set or something unplanned was asked for.
    """

    def __init__(self, run_dir: Path, trigger: Trigger | None = None, *, ahead: int = 0, refuse: str | None = None,
                 answers: bool = True, tools: Sequence[str] = (), mode: str = "?", planned: Collection[int] = ()):
        self.root = Path(run_dir)
        """The run directory: what rlprof writes here never follows a link planted at or under it."""
        self.requests = self.root / REQUESTS
        self.trigger = trigger
        self.ahead = ahead
        self.refuse = refuse
        self.answers = answers
        self.granted: dict[int, str] = {}
        """Step -> why it is captured, for the steps granted and not begun yet."""
        self.grants: list[Grant] = []
        """Every grant made or followed, in order."""
        self.triggered = 0
        """Captures triggers made so far (against ``max_captures``)."""
        self._seen: set[str] = set()
        self._mtime: int | None = None
        self._last = -1
        self._cooldown_until = 0
        self._settling = 0
        """The last step after a capture that the ``slow_step`` trigger leaves out."""
        self._times: deque[tuple[int, float]] = deque(maxlen=trigger.window if trigger else 1)
        self._decided: tuple[int, str | None] | None = None
        self.book = None
        """The driver's :class:`~rlprof.runtime.step_book.StepBook`, where step metrics reach it (the Ray
        controller): each step's figures, read at step start for the ``late_rank`` and ``rollout_tail`` triggers."""
        self._version = 0
        self._fed = 0
        self.stopped = False
        self.tools, self.mode, self.planned = list(tools), mode, frozenset(planned)
        self.seen = 0
        """Steps started (asked of :meth:`decide`)."""
        self.captured: list[tuple[int, str]] = []
        """The steps started with a grant, and why: what this run captured unplanned.""" 
        self._judged = 0
        """Steps ``slow_step`` judged (with a full window of history before them)."""
        self._slowest: tuple[float, int] | None = None
        """The largest factor over its window's median a judged step took, and that step."""
        self._latest: tuple[float, int] | None = None
        """The largest lateness (a share of the region's median) a step's figures showed, and that step."""
        if answers:
            self._listen()

    # ------------------------------------------------------------------ the step start

    def decide(self, step: int) -> str | None:
        """Why ``step`` (starting now) is captured unplanned, or None. Call once per step start; asking
        again for the same step gives the same answer (colocated Profilers of one process share a decider)."""
        if self._decided is not None and self._decided[0] == step:
            return self._decided[1]
        if self.book is not None:
            self._read_book()
        self.seen += 1
        self._last = step
        try:
            self._poll(step)
        except Exception as exc:  # a profiler never crashes training
            log.warning("rlprof: reading capture requests in %s failed (%s: %s); training goes on",
                        self.requests, type(exc).__name__, exc)
        reason = self.granted.pop(step, None)
        if reason is not None:
            self.captured.append((step, reason))
        for stale in [s for s in self.granted if s < step]:  # granted, but the driver skipped them
            del self.granted[stale]
        self._decided = (step, reason)
        return reason

    def grant(self, steps: tuple[int, ...], reason: str) -> Grant:
        """Capture ``steps`` for ``reason`` (steps already granted keep their first reason)."""
        for step in steps:
            self.granted.setdefault(step, reason)
        made = Grant(tuple(steps), reason)
        self.grants.append(made)
        return made

    # ------------------------------------------------------------------ triggers

    def step_ended(self, step: int, seconds: float, captured: bool = False) -> Grant | None:
        """Step ``step`` took ``seconds`` (the driver's own window): the ``slow_step`` trigger. A ``captured``
        step is slower for being captured, and so are the :data:`SETTLE_STEPS` after it (its trace is compressed
        and written in the background on the same cores): they neither fire nor count in the median."""
        trigger = self.trigger
        if trigger is None:
            return None
        if captured:
            self._settling = step + SETTLE_STEPS
            return None
        if step <= self._settling:  # the capture's trace is still being written beside these steps
            return None
        history = list(self._times)
        self._times.append((step, seconds))
        if trigger.slow_step is None or len(history) < trigger.window:
            return None
        median = statistics.median(s for _, s in history)
        self._judged += 1
        if median > 0 and (self._slowest is None or seconds / median > self._slowest[0]):
            self._slowest = (seconds / median, step)
        if median <= 0 or seconds <= trigger.slow_step * median:
            return None
        sentence = (f"step {step} took {seconds / median:.1f}\u00d7 the median ({median:.3g} s) of steps "
                    f"{history[0][0]}\u2013{history[-1][0]}")
        return self._fire(step, sentence)

    def figures(self, figures: Any) -> Grant | None:
        """A step's :class:`~rlprof.step_metrics.StepFigures` (where step metrics reach the driver): the
        ``late_rank`` and ``rollout_tail`` triggers."""
        trigger = self.trigger
        if trigger is None or not trigger.reads_figures:
            return None
        requests = getattr(figures, "requests", None)
        if trigger.rollout_tail is not None and requests is not None:
            for replica, f in sorted(requests.replicas.items()):
                if f.tail_share is not None and f.tail_share > trigger.rollout_tail:
                    sentence = (f"replica {replica}'s rollout tail took {f.tail_share:.0%} of its generate window in step "
                                f"{figures.step} ({f.tail_s:.3g} s after its running requests fell below half their peak "
                                f"of {f.peak})")
                    return self._fire(figures.step, sentence)
        if trigger.late_rank is None:
            return None
        for (role, region), f in sorted(figures.regions.items()):
            if f.late_rank >= 0 and f.median_s > 0 and (self._latest is None or f.late_by_s / f.median_s > self._latest[0]):
                self._latest = (f.late_by_s / f.median_s, figures.step)
        for (role, region), f in sorted(figures.regions.items()):
            if f.late_rank >= 0 and f.median_s > 0 and f.late_by_s > trigger.late_rank * f.median_s:
                sentence = (f"rank {f.late_rank} entered {region} of step {figures.step} {f.late_by_s:.3g} s after the "
                            f"others ({f.late_by_s / f.median_s:.0%} of its median {f.median_s:.3g} s)")
                return self._fire(figures.step, sentence)
        return None

    def _read_book(self) -> None:
        """Feed the figures of the steps completed since the last step start to :meth:`figures`."""
        book = self.book
        if self.trigger is None or not self.trigger.reads_figures or book.version == self._version:
            return
        self._version = book.version
        try:
            for figures in book.recent():
                if figures.step > self._fed:
                    self._fed = figures.step
                    self.figures(figures)
        except Exception as exc:  # never into training
            log.warning("rlprof: the late_rank/rollout_tail triggers could not read the step metrics (%s: %s)",
                        type(exc).__name__, exc)

    def _fire(self, step: int, sentence: str) -> Grant | None:
        trigger = self.trigger
        if self.triggered >= trigger.max_captures or step < self._cooldown_until:
            return None
        first = max(step, self._last) + 1 + max(0, self.ahead - 1)
        if first in self.granted:
            return None
        self.triggered += 1
        self._cooldown_until = first + trigger.cooldown_steps + 1
        log.warning("rlprof: capturing step %d: %s", first, sentence)
        made = self.grant((first,), f"{TRIGGERED}: {sentence}")
        if self.answers and self.ahead:  # other ranks follow the answers (a plain run's)
            try:
                write_json(self.requests / f"trigger-{first}{ANSWER}", {"steps": [first], "reason": made.reason}, self.root)
            except OSError as exc:
                log.warning("rlprof: cannot tell the other ranks of the triggered capture (%s)", exc)
        return made

    # ------------------------------------------------------------------ requests

    def _listen(self) -> None:
        try:
            from rlprof.layout import hostname

            ensure_dir(self.requests, self.root)
            write_json(self.requests / LISTENING, {"host": hostname(), "pid": os.getpid(), "since": time.time(),
                                                    "refuse": self.refuse}, self.root)
        except OSError as exc:
            log.warning("rlprof: cannot listen for capture requests in %s (%s); rlprof capture will not reach this run",
                        self.requests, exc)

    def outcome(self) -> str:
        """What this driver's unplanned captures came to, in one sentence: the steps captured and why, or why
        none was (no request came and no trigger is set; ``slow_step`` never had its window of history; no step
        or rank went past its trigger, and the most one did; a step granted after the run's last)."""
        if self.captured:
            return "captured " + "; ".join(f"step{'s' if len(steps) != 1 else ''} {', '.join(map(str, steps))} ({reason})"
                                           for reason, steps in self._captured_by_reason().items())
        if self.grants:
            g = self.grants[-1]
            return (f"nothing captured{' beyond the planned steps' if self.planned else ''}: step{'s' if len(g.steps) != 1 else ''} "
                    f"{', '.join(map(str, g.steps))} ({g.reason}) came after the run's last step ({self._last})")
        why = ["no rlprof capture request came"]
        trigger = self.trigger
        if trigger is None:
            why.append("no trigger is set (global_profiler.trigger)")
        else:
            if trigger.slow_step is not None:
                if not self._judged:
                    why.append(f"slow_step needs {trigger.window} steps of history; this run had {self.seen}")
                else:
                    most = f" (the most: {self._slowest[0]:.2f}x, step {self._slowest[1]})" if self._slowest else ""
                    why.append(f"no step took more than {trigger.slow_step:g}x the median of the {trigger.window} "
                               f"before it{most}")
            if trigger.late_rank is not None:
                if self._latest is None:
                    why.append("late_rank saw no step's figures (step metrics did not reach the driver)")
                else:
                    why.append(f"no rank entered a region later than {trigger.late_rank:.0%} of its median time "
                               f"(the most: {self._latest[0]:.0%}, step {self._latest[1]})")
        return ("nothing captured beyond the planned steps: " if self.planned else "nothing captured: ") + "; ".join(why)

    def _captured_by_reason(self) -> dict[str, list[int]]:
        by_reason: dict[str, list[int]] = {}
        for step, reason in self.captured:
            by_reason.setdefault(reason, []).append(step)
        return by_reason

    def stop(self) -> None:
        """The run ended: say so to ``rlprof capture`` (``driver.json`` gains ``ended``), and say what this run's
        unplanned captures came to (:meth:`outcome`): logged, and written as the run's ``armed`` record."""
        if self.stopped:
            return
        self.stopped = True
        if not self.answers:
            return
        try:
            if not self.planned or self.trigger is not None or self.grants:  # a planned run says nothing of what nobody asked
                self._record()
        except Exception as exc:  # never into training
            log.warning("rlprof: could not record what this armed run captured (%s: %s)", type(exc).__name__, exc)
        try:
            path = self.requests / LISTENING
            info = json.loads(path.read_text(encoding="utf-8"))
            info["ended"] = time.time()
            write_json(path, info, self.root)
        except (OSError, ValueError):
            pass

    def _record(self) -> None:
        """The ``armed`` record of this run, in a manifest of its own (``manifest/armed-<host>-<pid>.jsonl``)."""
        from dataclasses import asdict

        from rlprof.layout import hostname
        from rlprof.manifest import ArmedRecord, ManifestWriter

        said = self.outcome()
        log.warning("rlprof: the armed run ended: %s", said)
        record = ArmedRecord(tools=self.tools, mode=self.mode, trigger=asdict(self.trigger) if self.trigger else None,
                             steps=self.seen, captured=[{"steps": steps, "reason": reason}
                                                        for reason, steps in self._captured_by_reason().items()],
                             outcome=said)
        host, pid = hostname(), os.getpid()
        writer = ManifestWriter(self.root / "manifest" / f"armed-{host}-{pid}.jsonl",
                                {"run": self.root.name, "rank": None, "host": host, "pid": pid}, root=self.root)
        try:
            writer.write_record(record)
        finally:
            writer.close()

    def _poll(self, step: int) -> None:
        try:
            mtime = os.stat(self.requests).st_mtime_ns
        except OSError:
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        for path in sorted(self.requests.glob("*.json")):
            name = path.name
            if name in self._seen or name == LISTENING:
                continue
            if self.answers and not name.endswith(ANSWER):
                self._seen.add(name)
                self._answer(path, step)
            elif not self.answers and name.endswith(ANSWER):
                self._seen.add(name)
                answer = json.loads(path.read_text(encoding="utf-8"))
                if answer.get("steps"):
                    self.grant(tuple(answer["steps"]), answer["reason"])

    def _answer(self, path: Path, step: int) -> None:
        request_id = path.name[:-len(".json")]
        try:
            asked = json.loads(path.read_text(encoding="utf-8"))
            count = asked.get("steps", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"steps: {count!r}")
        except (OSError, ValueError, AttributeError) as exc:
            answer = {"id": request_id, "refused": f"the request could not be read ({exc})"}
        else:
            if self.refuse:
                answer = {"id": request_id, "refused": self.refuse}
            else:
                first = step + self.ahead
                # a trigger's step keeps its own reason; a planned one is captured anyway: a request asks for more
                # (fully async verl, asked as version 2 began: granted version 2, already planned, in 2 of 3 runs)
                while any(s in self.granted or s in self.planned for s in range(first, first + count)):
                    first += 1
                made = self.grant(tuple(range(first, first + count)), requested(request_id))
                answer = {"id": request_id, "steps": list(made.steps), "reason": made.reason, "asked_at_step": step}
                log.warning("rlprof: capture request %s: capturing step%s %s", request_id, "s" if count > 1 else "",
                            ", ".join(map(str, made.steps)))
        write_json(self.requests / f"{request_id}{ANSWER}", answer, self.root)


def refusal(config: Any, *, launched: bool, backends: Any = None) -> str | None:
    """Why a Ray run of ``config`` cannot capture a step mid-run, or None: a selected backend that must start
    with the worker process (it implements ``worker_runtime_env``: nsys) when the workers were not started
    with it (``launched``: some step was planned, so :func:`rlprof.integrations.ray_options.worker_options`
    started them under it)."""
    if launched:
        return None
    try:
        from rlprof.runtime.registry import Backends

        registry = Backends(config.global_.tools, rank=0, instances=backends)
        try:
            needing = list(dict.fromkeys(impl.backend for impl in registry.impls.get("worker_runtime_env", ())))
        finally:
            registry.close()
    except Exception as exc:
        return f"the backends could not be loaded to check that they can start mid-run ({type(exc).__name__}: {exc})"
    if not needing:
        return None
    return (f"{', '.join(needing)} cannot start mid-run: it must start with the worker processes, and this run's workers "
            f"were started without it (no global_profiler.steps planned). Plan a step (global_profiler.steps) to have "
            f"them started under it, or use a tool that starts mid-run (torch)")


_DECIDERS: dict[tuple[str, int, int], Decider] = {}


def process_decider(run: Any, trigger: Trigger | None, *, tools: Sequence[str] = (), mode: str = "?",
                    planned: Collection[int] = ()) -> Decider:
    """The decider of a plain Profiler's process (its colocated Profilers share it): rank 0 answers requests
    and fires triggers, :data:`AHEAD` steps on when there are other ranks; the other ranks follow its answers."""
    key = (str(run.run_dir), run.rank, os.getpid())
    decider = _DECIDERS.get(key)
    if decider is None or decider.stopped:
        lead = run.rank == 0
        decider = _DECIDERS[key] = Decider(run.run_dir, trigger if lead else None, ahead=AHEAD if run.world_size > 1 else 0,
                                           answers=lead, tools=tools, mode=mode, planned=planned)
    return decider
