"""A profiled step's traces analysed while the run goes on, off the training thread and out of its process.

Why: the step metrics give a profiled step's split (compute, exposed communication, exposed memory,
idle; the peak memory allocated) to the user's tracker during the run, not only in ``rlprof report`` after
it. The process that wrote a trace has it on its disk, so it analyses it, and the figures travel with its
step timings (:class:`~rlprof.runtime.step_timings.Batch` ``splits``) to the same place: its own
:class:`~rlprof.runtime.step_book.StepBook`, or the run's driver through Ray (never a shared disk).

How, per process (:class:`SplitAnalyser`, one per process session, made when a Profiler whose roles are timed
joins it):

* as the session lists a file of a captured step (``state: "writing"``, or a file listed without a state)
  from a backend that reads its own traces (it implements ``trace_reader``: a memory snapshot's, a debugger's
  dump's or a test backend's files cost no child and no warning), :meth:`SplitAnalyser.offer` **announces** it: one ``(step, None)`` per step it holds, appended to the
  timings (a list append on the training thread, nothing else), so the driver knows to wait for its figures;
* once the file is complete it is queued: when the process's trace writer places it
  (:func:`rlprof.runtime.trace_writer.pending_export`: the torch backend's traces, a replica's engine traces),
  or when it is listed ``written`` or without a state (a file no writer of this process writes). Not the
  ``written`` listing alone: its owner makes that at its next hook call, which the run's last capture (one
  asked with ``rlprof capture``, a trigger's) gets only at finalize, so its split came after the step's was
  written, without it (issue 46: verl's requested discrete capture lacked ``actor_update``). One daemon thread runs
  ``python -m rlprof.cli.step_split FILE`` (:mod:`rlprof.cli.step_split`, the figures of
  :mod:`rlprof.analysis.step_split`) for each, one at a
  time, at the lowest priority (:mod:`rlprof.priority`: a session of its own, nice 19 and ``SCHED_IDLE``), bounded by :data:`ANALYSIS_TIMEOUT_S`;
* the answer, ``(step, {(role, region): figures})`` per step the file holds (empty figures when the file
  is no trace an installed reader reads, or its analysis failed: then one log line), goes out with the
  next batch.
  A file that failed to be written (``failed``) answers empty at once.

``Profiler.finalize`` waits for none of it (issue 49: a 100k-event trace took 4 s to read, and a loaded machine
made finalize wait out its 10 s and drop the split): the files still queued or being analysed are handed on
(:meth:`SplitAnalyser.hand_off`), each step answered :func:`late`, and the step's book starts
:mod:`rlprof.analysis.late_split` for them, outside the process, which writes the step's split after the run.
Never raises into training.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlprof.priority import SPAWN, detached
from rlprof.priority import command as lowered
from rlprof.runtime.trace_writer import pending_export

log = logging.getLogger("rlprof")

MODULE = "rlprof.cli.step_split"
"""The program that analyses one trace (run by name, as a command is: the runtime never imports the analysis)."""
ANALYSIS_TIMEOUT_S = 600.0
"""The longest one trace's analysis may take; past it the child is killed and the file answers empty."""
FINAL_WAIT_S = 10.0
"""The default bound of :meth:`SplitAnalyser.wait` (tests and benchmarks; ``Profiler.finalize`` waits for nothing)."""
ANALYSED_STATES = (None, "written")
"""The ``state`` of an artifact record whose file is complete (None: listed once, written already)."""


class SplitAnalyser:
    """One process's traces analysed for the step metrics (see the module doc)."""

    def __init__(self, roles: tuple[str, ...]):
        self.roles = roles
        self._targets: list[Any] = []
        """The :class:`~rlprof.runtime.step_timings.RegionTimes` the announcements and answers go to: the first
        still open (colocated Profilers share the process's key, so any of them will do)."""
        self._queue: "queue.Queue[tuple[str, tuple[int, ...], Any]]" = queue.Queue()
        self._busy = 0
        """Files queued or being analysed (under the lock)."""
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._announced: set[str] = set()
        self._queued: set[str] = set()
        """Files queued for analysis (once each: when placed, or when listed complete, whichever comes first)."""
        self._unanswered: dict[str, tuple[int, ...]] = {}
        """Files queued or being analysed, and their steps (under the lock): what :meth:`hand_off` hands on."""
        self._handed = False
        """The process is done with its analysis: what is left goes on outside it (:meth:`hand_off`)."""
        self.seconds: list[float] = []
        """Wall seconds each analysis took (the child's start included), for benchmarks and tests."""

    def add(self, times: Any) -> None:
        """A Profiler whose roles are timed joined the session: its timings carry the splits too."""
        if times is not None and times not in self._targets:
            self._targets.append(times)

    def offer(self, path: Any, entry: dict[str, Any]) -> None:
        """The session listed ``entry`` (an artifact record) for the file at ``path`` (on the training thread:
        appends only)."""
        steps = tuple(s for s in entry.get("steps") or ([entry["step"]] if entry.get("step") is not None else [])
                      if isinstance(s, int))
        if not steps or not self._targets:
            return
        key, state = str(path), entry.get("state")
        if key not in self._announced:
            self._announced.add(key)
            self._send([(step, None) for step in steps])
        if key in self._queued:  # already queued: its answer goes once
            return
        placed = pending_export(path) if state == "writing" else None
        if state == "failed":
            self._send([(step, {}) for step in steps])
        elif state in ANALYSED_STATES or placed is not None:
            self._queued.add(key)
            with self._lock:
                if self._handed:  # written after the hand-off: it goes on outside the process too
                    self._send([(step, late(key, self.roles)) for step in steps])
                    return
                self._busy += 1
                self._unanswered[key] = steps
            self._queue.put((key, steps, placed))
            self._start()

    def hand_off(self) -> None:
        """The process is ending (``Profiler.finalize``): every file not answered yet is handed on instead of
        waited for: its steps get a :func:`late` answer naming it, and whoever combines them (the process's
        book, the run's driver) has it analysed outside the process, after the run if need be
        (:mod:`rlprof.analysis.late_split`). An analysis still running goes on while the process lives (its
        rows cached, which the late one reads); its answer is not sent. Never waits."""
        with self._lock:
            self._handed = True
            pending, self._unanswered = self._unanswered, {}
            self._send([(step, late(path, self.roles)) for path, steps in pending.items() for step in steps])

    def wait(self, wait_s: float = FINAL_WAIT_S) -> bool:
        """Wait until every file queued is analysed and its answer handed on, at most ``wait_s``. True when done."""
        deadline = time.monotonic() + wait_s
        with self._lock:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("rlprof: %d trace(s) still being analysed for the step metrics after %.0f s; their "
                                "split is left out", self._busy, wait_s)
                    return False
                self._lock.wait(min(left, 0.5))
        return True

    # ------------------------------------------------------------------ the thread

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rlprof-step-split", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            path, steps, placed = self._queue.get()
            try:
                if path not in self._unanswered:  # handed on before its turn
                    continue
                answer = self._answer(path, steps) if self._written(path, placed) else [(step, {}) for step in steps]
                with self._lock:
                    if self._unanswered.pop(path, None) is not None:  # not handed on meanwhile
                        self._send(answer)
            except Exception as exc:  # never kill the thread
                log.warning("rlprof: the split of %s is left out of the step metrics (%s: %s)", path, type(exc).__name__, exc)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._lock.notify_all()

    @staticmethod
    def _written(path: str, placed: Any) -> bool:
        """The file is in place: the writer's export of it finished without an error (at most
        :data:`ANALYSIS_TIMEOUT_S` waited), or it was listed complete (``placed`` None)."""
        if placed is None:
            return True
        if not placed.done.wait(ANALYSIS_TIMEOUT_S):
            log.warning("rlprof: the split of %s is left out of the step metrics: not written within %.0f s", path,
                        ANALYSIS_TIMEOUT_S)
            return False
        return placed.error is None

    def _answer(self, path: str, steps: tuple[int, ...]) -> list[tuple[int, dict]]:
        """``(step, figures)`` for every step of the file (empty figures for a step it holds none of)."""
        began = time.monotonic()
        found = analyse(path, self.roles, steps)
        self.seconds.append(time.monotonic() - began)
        return [(step, found.get(step, {})) for step in sorted(set(steps) | set(found))]

    def _send(self, splits: list[tuple[int, Any]]) -> None:
        for times in self._targets:
            if times.add_splits(splits):
                return


LATE = "late"


def late(path: str, roles: tuple[str, ...]) -> tuple[str, str, list[str]]:
    """A step's answer that says: the file at ``path`` (of a process hosting ``roles``) is analysed outside the
    process (:meth:`SplitAnalyser.hand_off`)."""
    return (LATE, str(path), list(roles))


def is_late(answer: Any) -> bool:
    return isinstance(answer, (tuple, list)) and len(answer) == 3 and answer[0] == LATE


LATE_MODULE = "rlprof.cli.late_split"
"""The program that finishes a step's split after the run (run by name, in a session of its own)."""


def start_late(job: dict[str, Any], folder: Path, root: Path) -> Path | None:
    """Write ``job`` (:mod:`rlprof.analysis.late_split`'s input) under ``folder`` and start its program, not
    waited for and not ended with this process: it removes the file once the split is written. None when it
    could not be started (said once)."""
    from rlprof.layout import ensure_dir, open_file

    try:
        ensure_dir(folder, root)
        path = folder / f"step{job['steps'][0]['step']}-{os.getpid()}-{time.time_ns()}.json"
        with open_file(path, root, "w") as out:
            out.write(json.dumps(job))
        detached([sys.executable, "-m", LATE_MODULE, str(path)])  # a Ray actor's children die with it
        return path
    except Exception as exc:
        from rlprof.notices import say_once

        say_once(f"late split: {type(exc).__name__}", log, "rlprof: the split of steps %s is left to rlprof report "
                 "(its late analysis could not start: %s: %s)", [s.get("step") for s in job.get("steps", [])],
                 type(exc).__name__, exc)
        return None


def analyse(path: str, roles: tuple[str, ...], steps: tuple[int, ...] = ()) -> dict[int, dict[tuple[str, str], dict]]:
    """Step -> (role, region) -> figures of the trace at ``path``, from :data:`MODULE` in a child process;
    empty when it is no trace or failed (said in one log line)."""
    command = lowered(MODULE, path, "--roles", ",".join(roles), "--steps", ",".join(map(str, steps)))
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=ANALYSIS_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"}, **SPAWN)
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except subprocess.TimeoutExpired:
        answer = {"error": f"not analysed within {ANALYSIS_TIMEOUT_S:.0f} s"}
    except (OSError, ValueError) as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    if "steps" not in answer:
        reason = answer.get("error") or (done.stderr.strip().splitlines() or [
            f"its analysis was stopped by signal {-done.returncode} (this process is ending)" if done.returncode < 0
            else "no answer"])[-1]
        log.warning("rlprof: the split of %s is left out of the step metrics: %s", path, reason)
        return {}
    return {int(step): {(role, region): figures for role, region, figures in regions}
            for step, regions in answer["steps"].items()}
