"""Where a run's step timings meet: per-step figures, the latest steps, the file, the hook, the tracker.

A :class:`StepBook` lives with the run's driver: verl's trainer (:mod:`rlprof.integrations.verl.step_metrics`),
the Ray controller (:class:`rlprof.integrations.ray.ProfilingController`), or, for a plain
:class:`~rlprof.Profiler`, the profiling process itself (:func:`rlprof.runtime.process_book.process_book`: one per run and process,
its colocated Profilers together). It is told:

* each step's **window** (``began``/``ended``, from the driver's own step calls; a plain Profiler's from its
  ``start_step``/``step_boundary``): a driver never tells its workers an unprofiled step (verl's trainer,
  the Ray controller), so **a region belongs to the step whose window holds its start**, on the wall clock
  every process shares; the one rule, whether a process knew its step or not. Regions outside every
  window (verl's validation before step 1) belong to no step;
* each process's timings (:class:`~rlprof.runtime.step_timings.Batch`, :meth:`receive`), off the training
  thread; each says how far it is complete (``through_ns``);
* each process's profiled steps' split (``Batch.splits``: its traces analysed as they are written,
  :mod:`rlprof.runtime.split_analyser`), combined per step (:meth:`pump`, the rule below), or a split
  computed elsewhere (:meth:`split`). A file its process handed on as it ended (``hand_off``) is not waited
  for: once the step's other files are answered, the step's figures so far and the files handed on go to a
  program of their own (:mod:`rlprof.analysis.late_split`, in ``<run>/late_splits/``) that writes the step's
  ``split`` line after the run (``late: true``; no hook call, no tracker: the run has ended).
* the rollout's request records (``Batch.requests``, or :meth:`requests`): :mod:`rlprof.runtime.step_requests`.

**A profiled step's split** is written once per step, when the step's own line is (every process has sent
what it did up to the step's end, so every file it captured in the step is announced) and every file
announced for the step has its answer; after :data:`SPLIT_WAIT_S` (a process died, an analysis is slow) or at
:meth:`close` with what came. Across processes, each region's fractions are those of the process whose window
in the region was longest (the one the step waited for), its ``peak_allocated_bytes`` the largest any process
recorded. A file announced after its step's split was written is left out.

It gives, off the training thread (:meth:`pump`, run by whoever delivers batches), each step's
:class:`~rlprof.step_metrics.StepFigures` once **complete** (every process that reports has sent what it
timed past the step's end, allowing :data:`SKEW_S` for clocks; a process silent for :data:`STALE_S` is not
waited for; after :data:`WAIT_S` the step is written with what came), in step order:

* :attr:`latest` and :meth:`recent`: what a driver's triggers read (the ``slow_step`` and ``late_rank``
  triggers: a step's time against the median of the last ``window`` steps, a rank's entry into a
  region against the others'); :attr:`version` counts the steps completed, so a reader knows what is new;
* one ``step`` line in the step metrics file (:class:`~rlprof.step_metrics.StepMetricsRecord`) and one
  ``step_metrics`` hook call (the selected backends that implement it: a Prometheus exporter, a wandb run;
  :mod:`rlprof.hookspecs`), each the step's figures;
* a ``split`` line and hook call per analysed profiled step, with :data:`~rlprof.step_metrics.SPLIT_STEP`.

And, on the driver's thread, :meth:`for_tracker`: the figures of the step a trainer's logger is logging now
(whatever has arrived: in practice all of it, each region's time is sent within
:data:`~rlprof.runtime.step_timings.FLUSH_S` of its end) and the oldest split not logged yet. It waits for
nothing; the time it takes is the figures' arithmetic for one step (bench/bench_step_metrics.py).

Never raises into its caller: a file that cannot be written is the writer's to report
(:class:`rlprof.manifest.ManifestWriter`); a hook that raises is contained by the registry.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from rlprof.config.values import DEFAULT_REQUEST_RECORDS_MB
from rlprof.layout import LATE_DIR, release_held_dirs
from rlprof.runtime.split_analyser import is_late, start_late
from rlprof.runtime.step_requests import StepRequests, records_path
from rlprof.step_work import Work
from rlprof.step_metrics import (PEAK, NOISE_STEPS, SPLIT_TIMES, StepFigures, StepMetricsRecord, Timing,
                                 add_region_figures, combine, split_metrics, step_figures)

log = logging.getLogger("rlprof")

SKEW_S = 0.05
"""How far past a step's end a process must have sent its timings before the step counts as complete
there (the hosts' wall clocks differ a little)."""
STALE_S = 6.0
"""A process that sent nothing for this long (twelve heartbeats) is not waited for."""
WAIT_S = 20.0
"""The longest a step's line waits for a process after the step ended."""
SPLIT_WAIT_S = 120.0
"""The longest a profiled step's split waits, after the step's line, for the files announced for it."""
KEEP = 256
"""How many completed steps :meth:`StepBook.recent` can give."""
TIMINGS_KEPT = 4096
"""A step's line lists its raw timings (for analyses that need the intervals: the async overlap) when it
has at most this many; a larger step's line says how many it left out."""


class _Process:
    __slots__ = ("through_ns", "heard", "final", "rank", "requests_only")

    def __init__(self, rank: int):
        self.rank, self.through_ns, self.heard, self.final = rank, 0, time.monotonic(), False
        self.requests_only = False


class StepBook:
    """One run's step metrics where its driver is (see the module doc).

    :param path: the step metrics file (None: none written).
    :param run_id: written in every line; the hook's ``run_id``.
    :param tools: the run's backends: those implementing ``step_metrics`` are called (None: no hook).
    :param own_windows: the windows come with the batches (a plain Profiler's process), not from a driver.
    :param records_mb: the budget of the rollout's request records (``global_profiler.request_records_mb``; 0: no limit).
    """

    def __init__(self, path: Path | None, run_id: str, tools: Iterable[str] | None = (), *, own_windows: bool = False,
                 root: Path | None = None, records_mb: float = DEFAULT_REQUEST_RECORDS_MB):
        self.path = path
        self.run_id = run_id
        self.tools = tuple(tools or ())
        self.own_windows = own_windows
        self._root = root
        self._lock = threading.Lock()
        self._began: list[tuple[int, int, bool]] = []
        """``(step, start_ns, profiled)`` the driver began, not taken into :attr:`_windows` yet (appended lock-free)."""
        self._ended: list[tuple[int, int]] = []
        self._calls_ended: dict[int, int] = {}
        """Step -> when the driver's calls into its workers for it ended (:meth:`calls_ended`), where the step's
        window ends later; set by the driver's thread (one item assignment, no lock)."""
        self._windows: dict[int, list[Any]] = {}
        """Step -> ``[start_ns, end_ns or None, profiled, timings, request records]`` of steps not written yet."""
        self._writing: dict[int, list[Any]] = {}
        """Steps the pump took out of :attr:`_windows` and has not put in :meth:`recent` yet (their line being made:
        the request records written, the figures computed, off the lock), as their windows were."""
        self._loose: list[Timing] = []
        """Timings whose step's window has not begun or ended yet, oldest first."""
        self.requests_kept = StepRequests(path and records_path(path, root or path.parent), root, records_mb)
        self._processes: dict[str, _Process] = {}
        self._expected = 0
        """How many processes the driver knows will report (:meth:`expect`): a step waits for that many to be
        heard from (at most :data:`WAIT_S`), so a worker whose first batch is slow to come is not left out."""
        self._recent: collections.deque[StepFigures] = collections.deque(maxlen=KEEP)
        self.version = 0
        """How many steps have completed (written) so far."""
        self._splits: list[tuple[int, dict[str, Any]]] = []
        """Analysed profiled steps' split metrics not given to the tracker yet, oldest first."""
        self._logged_split = 0
        self._parts: dict[int, dict[str, list[Any]]] = {}
        """Profiled step -> process -> ``[files announced and not answered, (role, region) -> figures so far]``."""
        self._parts_since: dict[int, float] = {}
        """Profiled step -> when its line was found written while some of its files were not answered."""
        self._split_done: set[int] = set()
        """Steps whose split was written (a later file of theirs is left out)."""
        self._writer: Any = None
        self._backends: Any = None
        self._hooked = self.tools == ()
        self.closed = False
        self.sending = threading.Lock()
        """Held by a process's sink while it hands the book a batch (:class:`ProcessSink`)."""

    # ------------------------------------------------------------------ inputs

    def began(self, step: int, start_ns: int, profiled: bool = False) -> None:
        """The driver's step ``step`` began (its thread: one append, no lock)."""
        self._began.append((step, start_ns, profiled))

    def ended(self, step: int, end_ns: int) -> None:
        """The driver's step ``step`` ended (its thread: one append, no lock)."""
        self._ended.append((step, end_ns))

    def calls_ended(self, step: int, at_ns: int) -> None:
        """The driver's calls into its workers for ``step`` ended at ``at_ns``, and its window goes on with the
        driver's own work (verl's V1 trainer: ``_stop_profiling``, inside its ``step`` phase, then the weight sync
        of ``on_step_end``): :meth:`for_tracker` waits for every process's timings up to ``at_ns`` only. A worker
        idle after it sends its next batch at its heartbeat (:data:`~rlprof.runtime.step_timings.HEARTBEAT_S`),
        which the trainer's logger, called right after the window's end, would otherwise wait for. The step's
        line still waits for the window's end (off the training thread)."""
        self._calls_ended[step] = at_ns

    def expect(self, processes: int) -> None:
        """The driver knows ``processes`` processes will send timings (its workers with a timed role): until
        that many have been heard from, a step is complete only after :data:`WAIT_S` (a worker's first batch
        can come after the first step's end: the run's mailbox is made as the workers start)."""
        with self._lock:
            self._expected = max(self._expected, processes)

    def receive(self, batch: Any) -> None:
        """A process's batch (:class:`~rlprof.runtime.step_timings.Batch`: its timings, windows and splits);
        then :meth:`pump`."""
        with self._lock:
            process = self._processes.get(batch.process)
            if process is None:
                process = self._processes[batch.process] = _Process(batch.rank)
            process.heard = time.monotonic()
            process.through_ns = max(process.through_ns, batch.through_ns)
            process.final = process.final or batch.final
            process.requests_only = getattr(batch, "requests_only", False)
            if self.own_windows:
                for step, start, end, profiled in batch.windows:
                    self._began.append((step, start, profiled))
                    self._ended.append((step, end))
            self._loose.extend(Timing(batch.rank, role, region, start, end) for role, region, start, end in batch.timings)
            self.requests_kept.add(getattr(batch, "requests", ()))
            self._loose.extend(Work(batch.rank, *work) for work in getattr(batch, "work", ()))  # a step's by its time
            for step, figures in getattr(batch, "splits", ()):
                self._part(batch.process, step, figures)

    def _part(self, process: str, step: int, figures: dict[tuple[str, str], dict] | None) -> None:
        """One announcement (``figures`` None) or one file's answer of ``process`` for ``step`` (under the lock)."""
        if step in self._split_done:
            return
        part = self._parts.setdefault(step, {}).setdefault(process, [0, {}, []])
        if figures is None:
            part[0] += 1
            return
        part[0] = max(0, part[0] - 1)
        if is_late(figures):  # the process handed the file on: analysed outside it (pump starts that)
            part[2].append(list(figures[1:]))
            return
        for key, values in figures.items():  # the same region in two files of the step: it ran twice
            add_region_figures(part[1].setdefault(key, {}), values)

    def requests(self, records: Iterable[Any]) -> None:
        """Request records the driver has itself (a framework's per-sample metrics), taken as a batch's are."""
        with self._lock:
            self.requests_kept.add(records)

    def timing(self, rank: int, role: str, region: str, start_ns: int, end_ns: int) -> None:
        """A region the driver timed itself (verl's trainer: the rollout as it waited for it)."""
        with self._lock:
            self._loose.append(Timing(rank, role, region, start_ns, end_ns))

    def split(self, step: int, figures: dict[tuple[str, str], dict[str, float]], processes: int = 0) -> None:
        """The split of profiled step ``step`` was analysed: ``(role, region) -> {compute_frac: ...}``
        (:data:`~rlprof.step_metrics.SPLIT_FIGURES`), from ``processes`` processes' traces. Written and handed to
        the hook now, to the tracker at its next step."""
        metrics = split_metrics(step, figures)
        with self._lock:
            self._splits.append((step, metrics))
        self._emit(StepMetricsRecord("split", step, metrics, processes=processes))

    def framework(self, step: int, metrics: dict[str, float], details: dict[str, Any] | None = None) -> None:
        """The trainer's own figures of ``step`` that rlprof's stand beside (verl's ``perf/mfu/*``): one
        ``framework`` line, for the report (never to the hook: they are the trainer's, already in its tracker)."""
        self._emit(StepMetricsRecord("framework", step, dict(metrics), work=dict(details or {})), hook=False)

    # ------------------------------------------------------------------ outputs

    @property
    def latest(self) -> StepFigures | None:
        """The last step completed, or None."""
        recent = self._recent
        return recent[-1] if recent else None

    def recent(self, count: int | None = None) -> list[StepFigures]:
        """The last ``count`` steps completed (all kept, at most :data:`KEEP`), oldest first."""
        steps = list(self._recent)
        return steps if count is None else steps[-count:] if count > 0 else []

    def for_tracker(self, step: int, wait_s: float = 0.0) -> dict[str, Any]:
        """On the trainer's thread, as its logger logs ``step``: that step's figures from what has arrived,
        and the oldest analysed split not logged yet (with its own step key). Empty when there is nothing.
        ``wait_s``: wait at most that long for every process that reports timings to have sent them past the
        step's end, or past the end of the driver's calls into its workers (:meth:`calls_ended`) where that came
        first (another thread delivers them: :meth:`receive`); not for one that sends request records only
        (``Batch.requests_only``: a replica, paused or idle, is heard at its heartbeat only): its records are
        sent as each request finishes, and those that arrived are the step's here (its line waits for all); and, for a step of more request records
        than :data:`~rlprof.runtime.step_requests.ON_CALLER` (their figures: 6 ms a thousand), for its line, whose
        figures the delivering thread computes; past it they are computed here."""
        deadline = time.monotonic() + wait_s
        while wait_s > 0 and not self._arrived(step) and time.monotonic() < deadline:
            time.sleep(0.002)
        if wait_s > 0 and self.requests_kept.many(self._windows.get(step) or self._writing.get(step)):
            while self._written(step) is None and time.monotonic() < deadline:
                time.sleep(0.002)
        with self._lock:
            self._assign()
            # a step the pump is writing now is neither open nor written yet: its window is kept meanwhile (without
            # it the logger got none of the step's figures: CI's verl e2e run, '(3, [])')
            window = self._windows.get(step) or self._writing.get(step)
            done = self._written(step)
            timings = list(window[3]) if window is not None and done is None else None
            records = list(window[4]) if window is not None and done is None else []
            start_ns, end_ns = (window[0], window[1]) if window is not None else (0, 0)
            split = self._splits.pop(0) if self._splits else None
            processes = len(self._processes)
        out: dict[str, Any] = {}
        if done is not None:
            out.update(done.metrics())
        elif timings is not None and end_ns is not None:
            out.update(step_figures(step, start_ns, end_ns, timings, self.recent(NOISE_STEPS), processes,
                                    self.requests_kept.figures(step, records)).metrics())
        if split is not None:
            out.update(split[1])
        return out

    def _written(self, step: int) -> StepFigures | None:
        """``step``'s figures if it was written (is among :meth:`recent`). From a copy: the pump appends to the deque
        outside the lock, and iterating the deque itself while it does raised (``deque mutated during iteration``:
        a trainer's logger then logged a step without any ``rlprof/`` figure, test_verl_trainer's e2e run in CI)."""
        return next((f for f in reversed(tuple(self._recent)) if f.step == step), None)

    # ------------------------------------------------------------------ the work

    def pump(self, closing: bool = False) -> int:
        """Complete what can be completed (``closing``: everything with a window that ended, whatever has
        arrived); write each, in step order. Returns how many steps completed."""
        completed = []
        with self._lock:
            self._assign()
            now = time.monotonic()
            for step in sorted(self._windows):
                start_ns, end_ns, profiled, timings, records = self._windows[step]
                if closing and end_ns is None:  # never ended (the driver stopped inside it): no figures
                    del self._windows[step]
                    self._calls_ended.pop(step, None)
                    self.requests_kept.written(step, None)
                    continue
                if end_ns is None or not (closing or self._complete(end_ns, now)):
                    break
                self._writing[step] = self._windows.pop(step)
                self._calls_ended.pop(step, None)
                self.requests_kept.written(step, end_ns)
                completed.append((step, start_ns, end_ns, profiled, timings, records, len(self._processes)))
        for step, start_ns, end_ns, profiled, timings, records, processes in completed:
            requests, stored = self.requests_kept.keep(step, start_ns, records)
            figures = step_figures(step, start_ns, end_ns, timings, self.recent(NOISE_STEPS), processes, requests)
            self._recent.append(figures)
            with self._lock:
                self._writing.pop(step, None)
            self.version += 1
            self._emit(StepMetricsRecord("step", step, figures.metrics(), start_ns, end_ns, processes, profiled,
                                         figures.work(), _raw([t for t in timings if not isinstance(t, Work)], start_ns),
                                         stored))
        self.requests_kept.keep_after(self._lock)  # records of a step written before their process was heard of
        late = []
        for step, split, processes in self._splits_ready(closing):
            if isinstance(split, list):  # some of its files were handed on: their split is finished outside
                late.append({"step": step, "processes": split})
            elif split:
                self.split(step, split, processes)
        if late:  # one program for the steps ready now: their lines in step order
            start_late({"run": self.run_id, "metrics": str(self.path), "steps": late}, self._root / LATE_DIR, self._root)
        return len(completed)

    def _splits_ready(self, closing: bool) -> list[tuple[int, dict[tuple[str, str], dict[str, float]], int]]:
        """The profiled steps whose split can be written now (the rule in the module doc), combined, in step order."""
        ready = []
        with self._lock:
            now = time.monotonic()
            for step in sorted(self._parts):
                if not closing and (step in self._windows or any(s == step for s, _, _ in self._began)):
                    continue  # its line is not written yet: a file of it may not be announced yet
                parts = self._parts[step]
                if not closing and any(part[0] > 0 for part in parts.values()):
                    if now - self._parts_since.setdefault(step, now) < SPLIT_WAIT_S:
                        continue
                del self._parts[step]
                self._parts_since.pop(step, None)
                self._split_done.add(step)
                if self.path is not None and self._root is not None and any(part[2] for part in parts.values()):
                    ready.append((step, [{"figures": [[*key, values] for key, values in part[1].items()], "late": part[2]}
                                         for part in parts.values()], len(parts)))
                    continue
                answered = [part[1] for part in parts.values() if part[1]]
                ready.append((step, combine(answered), len(answered)))
        return ready

    def _arrived(self, step: int) -> bool:
        """Every process that reports has sent what it timed up to the end of ``step`` (or the step is
        written, or unknown, or not ended)."""
        with self._lock:
            self._assign()
            window = self._windows.get(step)
            if window is None or window[1] is None:
                return True
            now = time.monotonic()
            if len(self._processes) < self._expected:
                return False
            through = min(window[1], self._calls_ended.get(step, window[1]))
            return all(p.requests_only or p.final or p.through_ns >= through or now - p.heard > STALE_S
                       for p in self._processes.values())

    def _complete(self, end_ns: int, now: float) -> bool:
        """Every process that reports has sent what it timed past ``end_ns`` (or is final, or silent)."""
        waited = (time.time_ns() - end_ns) / 1e9
        if waited > WAIT_S:
            return True
        if len(self._processes) < self._expected:
            return False
        past = end_ns + int(SKEW_S * 1e9)
        return all(p.final or p.through_ns >= past or now - p.heard > STALE_S for p in self._processes.values())

    def _assign(self) -> None:
        """Take the windows begun and ended, and give each loose timing to the step whose window holds its
        start (under the lock). A timing before every window open now belongs to no step."""
        n = len(self._began)
        for step, start_ns, profiled in self._began[:n]:
            window = self._windows.get(step)
            if window is None:
                self._windows[step] = [start_ns, None, profiled, [], []]
            else:  # colocated Profilers of one process each began it: the earliest start
                window[0] = min(window[0], start_ns)
                window[2] = window[2] or profiled
        del self._began[:n]
        n = len(self._ended)
        for step, end_ns in self._ended[:n]:
            window = self._windows.get(step)
            if window is not None:
                window[1] = end_ns if window[1] is None else max(window[1], end_ns)
        del self._ended[:n]
        self.requests_kept.assign(self._windows)
        if not self._loose or not self._windows:
            return
        ordered = sorted(self._windows.items(), key=lambda item: item[1][0])
        first = ordered[0][1][0]
        kept = []
        for timing in self._loose:
            if timing.start_ns < first:
                continue  # before the oldest window still open: no step of this run holds it
            home = None
            for step, window in ordered:
                if window[0] <= timing.start_ns and (window[1] is None or timing.start_ns <= window[1]):
                    home = window
            if home is not None:
                home[3].append(timing)
            elif ordered[-1][1][1] is None or timing.start_ns > ordered[-1][1][1]:
                kept.append(timing)  # its window may not have begun yet (the driver's call comes later)
        self._loose = kept

    def _emit(self, record: StepMetricsRecord, hook: bool = True) -> None:
        """One line of the file and one hook call (off the training thread)."""
        from rlprof.manifest import record_fields

        if self.path is not None:
            if self._writer is None:
                from rlprof.manifest import ManifestWriter

                self._writer = ManifestWriter(self.path, {"run": self.run_id}, root=self._root or self.path.parent)
            self._writer.write(record.TYPE, **record_fields(record))
        backends = self._hook_backends() if hook else None
        if backends is not None:
            backends.call("step_metrics", step=record.step, metrics=dict(record.metrics), run_id=self.run_id)

    def _hook_backends(self) -> Any:
        """The run's backends that implement ``step_metrics``, loaded once, here (never on the training
        thread); None when none does or they cannot be loaded (said once)."""
        if self._hooked:
            return self._backends
        self._hooked = True
        try:
            from rlprof.runtime.registry import Backends

            backends = Backends(self.tools)
            self._backends = backends if backends.has("step_metrics") else None
        except Exception as exc:
            log.warning("rlprof: the step_metrics hook is not called for this run: %s: %s", type(exc).__name__, exc)
        return self._backends

    def close(self) -> None:
        """Write every step whose window ended, whatever has arrived; then no more."""
        if self.closed:
            return
        self.pump(closing=True)
        self.closed = True
        with self._lock:
            self.requests_kept.close()
        if self._writer is not None:
            self._writer.close()
            release_held_dirs()  # its last lines may come after the session released them: nothing stays open
        if self._backends is not None:
            self._backends.close()

    def wait_and_close(self, wait_s: float, poll: Callable[[], None] | None = None) -> None:
        """At the end of a run: ``poll`` (which delivers batches) until every step is complete or
        ``wait_s`` has passed, then :meth:`close`."""
        deadline = time.monotonic() + wait_s
        while True:
            if poll is not None:
                poll()
            self.pump()
            with self._lock:
                left = any(w[1] is not None for w in self._windows.values()) or any(
                    part[0] > 0 for parts in self._parts.values() for part in parts.values())
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        self.close()


def _raw(timings: list[Timing], start_ns: int) -> dict[str, Any]:
    """A step's timings for its line, columnar, seconds after the step's start: ``{"<role>/<region>":
    {"rank": [...], "start_s": [...], "end_s": [...]}}``; ``{"left_out": n}`` past :data:`TIMINGS_KEPT`."""
    if len(timings) > TIMINGS_KEPT:
        return {"left_out": len(timings)}
    out: dict[str, Any] = {}
    for t in sorted(timings, key=lambda t: (t.role, t.region, t.start_ns)):
        columns = out.setdefault(f"{t.role}/{t.region}", {"rank": [], "start_s": [], "end_s": []})
        columns["rank"].append(t.rank)
        columns["start_s"].append(round((t.start_ns - start_ns) / 1e9, 6))
        columns["end_s"].append(round((t.end_ns - start_ns) / 1e9, 6))
    return out


def timed(config: Any) -> bool:
    """Some role of ``config`` is timed on every step (a tool set, ``step_metrics`` on, the role enabled):
    a driver then keeps a book (the same rule as :attr:`rlprof.runtime.plan.ProcessPlan.timed`)."""
    g = config.global_
    return bool(g.tools and g.step_metrics and any(role.enable for role in config.roles.values()))
