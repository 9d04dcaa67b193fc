"""Every process's step timings, to the run's driver, through Ray (never a shared disk).

Why a mailbox actor: the driver that combines a run's steps (verl's trainer, in its ``TaskRunner`` actor;
the Ray controller, in the user's script) is busy running the training loop, and its workers hear nothing
of an unprofiled step, so there is no reply the timings could ride on (:mod:`rlprof.integrations.nodes`
carries manifest records on the replies of profiled steps only, and making a call every step to fetch
them would cost the driver a round trip of every worker per step). So each run has one small actor,
:class:`Mailbox` (``num_cpus=0``, named after the run in the ``rlprof`` namespace, owned by the driver
that made it, on the driver's node):

* in every worker process, its Profilers' flusher thread (:mod:`rlprof.runtime.step_timings`) sends each
  batch with ``mailbox.put.remote(batch)``: fire and forget, off the training thread (:class:`RaySink`);
* in the driver's process, one daemon thread (:class:`Collector`) asks ``mailbox.take`` (which answers as
  soon as something is there, or after :data:`TAKE_WAIT_S`) and hands each batch to the driver's
  :class:`~rlprof.runtime.step_book.StepBook`, which completes the steps and writes them.

A region's time reaches the driver about :data:`~rlprof.runtime.step_timings.FLUSH_S` plus two Ray
messages after it ended. A worker in a run without a mailbox (a plain Profiler inside some actor) keeps
its figures to itself: its process's own file (:func:`rlprof.runtime.process_book.process_book`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from rlprof.runtime.run_id import in_ray

log = logging.getLogger("rlprof")

NAMESPACE = "rlprof"
TAKE_WAIT_S = 0.5
"""The longest one ``take`` waits for a batch (the collector's thread then looks at the steps again)."""


def mailbox_name(run_id: str) -> str:
    return f"rlprof-step-timings-{run_id}"


class Mailbox:
    """The run's mailbox (an async Ray actor: ``put`` never waits behind a ``take``)."""

    def __init__(self) -> None:
        self._batches: list[Any] = []
        self._arrived = asyncio.Event()

    async def put(self, batch: Any) -> None:
        self._batches.append(batch)
        self._arrived.set()

    async def take(self, wait_s: float) -> list[Any]:
        """What was put since the last take; waits up to ``wait_s`` for the first."""
        if not self._batches:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        batches, self._batches = self._batches, []
        return batches


def open_mailbox(run_id: str) -> Any:
    """The run's mailbox, made here (the driver) if no one made it yet; owned by this process."""
    import ray

    from rlprof.integrations.nodes import current_node, pinned

    node = current_node()
    options = {"name": mailbox_name(run_id), "namespace": NAMESPACE, "get_if_exists": True, "num_cpus": 0,
               "max_restarts": 0, **(pinned(node) if node else {})}
    return ray.remote(Mailbox).options(**options).remote()


def send_to_driver(profiler: Any) -> None:
    """In a Ray worker: ``profiler``'s timings go to its run's mailbox (its own file where the run has none)."""
    times = getattr(profiler, "timings", None)
    if times is not None and in_ray() and not isinstance(times.sink, RaySink):
        times.sink = RaySink(profiler.run.run_id, times.sink)
        times.outlives = True  # the driver's steps go on after this Profiler's profiling ended


LOOKUP_S = 300.0
"""How long a worker keeps looking for its run's mailbox (every :data:`LOOKUP_EVERY_S`, holding its batches)
before it keeps its figures to itself: verl's trainer makes the mailbox at its first step, after its
workers were built and validated."""
LOOKUP_EVERY_S = 1.0
LOOKUP_EARLY_S = 0.1
"""How often a worker looks for the mailbox in its first :data:`EARLY_S` seconds: a run whose steps are short (verl's
in-process vLLM server, three steps in 0.6 s) had its steps written before a replica that looked once a second found
the mailbox, and their lines lacked the replica's request records. A lookup is one call to Ray's GCS (about a ms)."""
EARLY_S = 60.0


class RaySink:
    """A worker Profiler's sink (:class:`rlprof.runtime.step_timings.Sink`): the run's mailbox, looked up on
    the flusher thread (again every :data:`LOOKUP_EARLY_S`, after a minute every :data:`LOOKUP_EVERY_S`, for
    :data:`LOOKUP_S`, the batches held meanwhile);
    ``fallback`` (the process's own book) when the run has none."""

    def __init__(self, run_id: str, fallback: Any):
        self.run_id = run_id
        self.fallback = fallback
        self._handle: Any = None
        self._given_up = False
        self._first = time.monotonic()
        self._last_look = -LOOKUP_EVERY_S
        self._held: list[Any] = []

    def _look(self) -> None:
        now = time.monotonic()
        if now - self._last_look < (LOOKUP_EARLY_S if now - self._first < EARLY_S else LOOKUP_EVERY_S):
            return
        self._last_look = now
        try:
            import ray

            self._handle = ray.get_actor(mailbox_name(self.run_id), namespace=NAMESPACE)
        except Exception:  # not made yet, or no driver collects this run's steps
            self._handle = None
            self._given_up = now - self._first > LOOKUP_S

    def send(self, batch: Any) -> None:
        if self._handle is None and not self._given_up:
            self._look()
        if self._handle is None:
            if not self._given_up and not batch.final:
                self._held.append(batch)
                return
            held, self._held = self._held, []
            for old in held:  # the process keeps its own figures
                self.fallback.send(old)
            self.fallback.send(batch)
            return
        held, self._held = self._held, []
        for old in held:
            self._handle.put.remote(old)
        self._handle.put.remote(batch)


class Collector:
    """The driver's thread: takes the mailbox's batches into ``book`` and completes steps (see the module doc)."""

    def __init__(self, book: Any, mailbox: Any):
        self.book = book
        self.mailbox = mailbox
        self.batches = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rlprof-step-metrics", daemon=True)
        self._lock = threading.Lock()
        """One ``take`` at a time (the thread's, or :meth:`finish`'s)."""
        self._thread.start()

    def _take(self, wait_s: float) -> int:
        import ray

        with self._lock:
            batches = ray.get(self.mailbox.take.remote(wait_s), timeout=wait_s + 30.0)
            for batch in batches:
                self.book.receive(batch)
            self.batches += len(batches)
        self.book.pump()
        return len(batches)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._take(TAKE_WAIT_S)
                failures = 0
            except Exception as exc:  # the mailbox died with the run, or Ray is shutting down
                failures += 1
                if failures == 1:
                    log.warning("rlprof: step timings could not be taken from the run's mailbox (%s: %s)",
                                type(exc).__name__, exc)
                if failures > 3:
                    return
                time.sleep(TAKE_WAIT_S)

    def finish(self, wait_s: float) -> None:
        """At the run's end: stop the thread, take what the workers sent last (waiting at most ``wait_s`` for
        the steps to complete), write every step, and end the mailbox."""
        self._stop.set()
        self._thread.join(TAKE_WAIT_S + 35.0)

        def poll() -> None:
            try:
                self._take(0.05)
            except Exception:
                pass

        self.book.wait_and_close(wait_s, poll)
        try:
            import ray

            ray.kill(self.mailbox)
        except Exception:
            pass
