"""The fan-out: one rlprof call to every worker, a bounded wait, and what became of each worker.

Every fan-out waits at most ``timeout_s``: a dead or hung worker is reported (which worker, which
rank, what error) and never hangs the controller; the other ranks carry on. A worker that died or
timed out is **not waited for again**: later fan-outs skip it (and say so once), so a hung rank
costs the timeout once per run, not once per step. A hung worker that answers again (its stuck call
finished) rejoins at the next fan-out; ``finalize`` is still sent to it, without waiting, so it can
write its captures if it ever gets there.

What became of each worker is one fact with one owner, the :class:`Workers` table: label -> a
:class:`Worker` whose ``state`` is one of

=========================  ======================================  ====================================
state                      how a worker gets there                 what a fan-out does with it
=========================  ======================================  ====================================
:data:`LIVE`               added; a stuck call of it ended         calls it and waits
:class:`Stuck`             no answer within the timeout            skips it (says so once); sends
                                                                   ``finalize`` without waiting
:class:`Dead`              its actor is gone                       never calls it again
:class:`Finished`          it answered ``finalize`` (its records)  calls it and waits (a second finalize)
=========================  ======================================  ====================================

and the controller's ``dead``, ``unresponsive``, ``handles`` and ``pending`` are read from it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from rlprof.integrations.ray_options import WorkerSpec

log = logging.getLogger("rlprof")

DEFAULT_TIMEOUT_S = 300.0
"""How long a fan-out waits for a worker. Generous: closing a capture can mean writing a large trace."""


@dataclass(frozen=True)
class WorkerFailure:
    """A worker that did not answer an rlprof call: ``kind`` is ``died`` (the actor is gone),
    ``timeout`` (no answer within the timeout) or ``error`` (the call raised)."""

    worker: str
    rank: int
    call: str
    step: int | None
    kind: str
    error: str

    def __str__(self) -> str:
        when = f" at step {self.step}" if self.step is not None else ""
        return f"{self.worker} (rank {self.rank}) {self.kind} in {self.call}{when}: {self.error}"


@dataclass
class FanOut:
    """What one fan-out returned: results by worker label, the failures, the workers it did not
    wait for (dead or unresponsive since an earlier fan-out), how long it took."""

    call: str
    step: int | None
    results: dict[str, Any] = field(default_factory=dict)
    failures: list[WorkerFailure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


# ------------------------------------------------------------------------------ a worker's state


@dataclass(frozen=True)
class Live:
    """Called and waited for."""


LIVE = Live()


@dataclass
class Stuck:
    """It did not answer ``failure.call`` in time: the call's ref (done = it answers again)."""

    ref: Any
    failure: WorkerFailure
    since: float
    said: bool = False
    """Whether a fan-out has said it skips this worker (said once)."""


@dataclass(frozen=True)
class Dead:
    """Its actor is gone (``failure`` says when and how)."""

    failure: WorkerFailure


@dataclass(frozen=True)
class Finished:
    """It answered ``finalize``: its artifact records."""

    records: list[dict[str, Any]]


@dataclass
class Worker:
    spec: WorkerSpec
    handle: Any
    state: Live | Stuck | Dead | Finished = LIVE
    last_step: int | None = None
    """The last profiled step whose end it answered: its records up to this step are with the controller."""


class Workers:
    """The controller's workers, by label, and what became of each (see the module doc)."""

    def __init__(self) -> None:
        self._by_label: dict[str, Worker] = {}

    def add(self, spec: WorkerSpec, handle: Any) -> None:
        if spec.label in self._by_label:
            raise ValueError(f"worker {spec.label} added twice")
        self._by_label[spec.label] = Worker(spec, handle)

    def __getitem__(self, label: str) -> Worker:
        return self._by_label[label]

    def __iter__(self) -> Iterator[tuple[str, Worker]]:
        return iter(self._by_label.items())

    def in_state(self, kind: type) -> dict[str, Any]:
        """Label -> state, for the workers whose state is a ``kind``."""
        return {label: w.state for label, w in self._by_label.items() if isinstance(w.state, kind)}

    def fan_out(self, call: str, step: int | None, submit: Callable[[WorkerSpec, Any], Any],
                receive: Callable[[Any], Any], timeout_s: float) -> FanOut:
        """``submit(spec, handle)`` (returns a ref) for every worker that is not dead or stuck, then
        wait at most ``timeout_s`` for all of them; ``receive`` unwraps each reply. Failures are
        logged here and listed in the result; the caller records them."""
        import ray

        started = time.perf_counter()
        result = FanOut(call, step)
        self._readmit(ray, receive)
        pending: dict[Any, str] = {}
        for label, worker in self._by_label.items():
            state = worker.state
            if isinstance(state, Dead):
                continue
            if isinstance(state, Stuck):
                self._skip(result, label, state, timeout_s)
                if call == "finalize":
                    _send_without_waiting(submit, worker)  # queued behind the stuck call
                continue
            try:
                pending[submit(worker.spec, worker.handle)] = label
            except Exception as exc:  # e.g. the handle's actor is known dead
                self._fail(result, label, "died", exc)
        ready, not_ready = ray.wait(list(pending), num_returns=len(pending), timeout=timeout_s) if pending else ([], [])
        for ref in ready:
            label = pending[ref]
            try:
                result.results[label] = receive(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                self._fail(result, label, "died", exc)
            except Exception as exc:
                self._fail(result, label, "error", exc)
            else:
                self._answered(label, result)
        for ref in not_ready:
            label = pending[ref]
            failure = self._fail(result, label, "timeout", TimeoutError(f"no answer within {timeout_s:g} s"))
            self._by_label[label].state = Stuck(ref, failure, time.monotonic())
        result.seconds = time.perf_counter() - started
        return result

    # ---------------------------------------------------------------- the transitions

    def _answered(self, label: str, result: FanOut) -> None:
        worker = self._by_label[label]
        value = result.results[label]
        if result.call == "step_boundary":
            worker.last_step = result.step
        elif result.call == "finalize" and isinstance(value, list):
            worker.state = Finished(value)

    def _readmit(self, ray, receive: Callable[[Any], Any]) -> None:
        """Workers whose stuck call has ended answer again: take them back (one ``ray.wait`` that
        does not wait, for all of them)."""
        stuck = self.in_state(Stuck)
        if not stuck:
            return
        refs = {state.ref: label for label, state in stuck.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            label = refs[ref]
            self._by_label[label].state = LIVE
            try:
                receive(ray.get(ref, timeout=0))  # the manifest lines its late reply carries
            except Exception:  # the late call raised: nothing rode on it
                pass
            log.warning("rlprof: worker %s answered again %.1f s after it stopped answering (%s); the controller "
                        "waits for it again", label, time.monotonic() - stuck[label].since, stuck[label].failure.call)

    def _skip(self, result: FanOut, label: str, stuck: Stuck, timeout_s: float) -> None:
        result.skipped.append(label)
        if not stuck.said:
            stuck.said = True
            failure = stuck.failure
            when = f" at step {failure.step}" if failure.step is not None else ""
            log.warning("rlprof: not waiting for worker %s (rank %d) in %s or later calls: it has not answered "
                        "%s%s for %.0f s", label, failure.rank, result.call, failure.call, when,
                        time.monotonic() - stuck.since + timeout_s)

    def _fail(self, result: FanOut, label: str, kind: str, exc: BaseException) -> WorkerFailure:
        spec = self._by_label[label].spec
        failure = WorkerFailure(worker=label, rank=spec.rank, call=result.call, step=result.step, kind=kind,
                                error=describe_error(exc))
        if kind == "died":
            self._by_label[label].state = Dead(failure)
        result.failures.append(failure)
        if kind == "error":
            log.error("rlprof: worker %s", failure)
        else:
            log.error("rlprof: worker %s; the controller goes on without it and does not wait for it again", failure)
        return failure


def _send_without_waiting(submit: Callable[[WorkerSpec, Any], Any], worker: Worker) -> None:
    try:
        submit(worker.spec, worker.handle)
    except Exception:  # the actor may be gone by now: nothing to tell it
        pass


def describe_error(exc: BaseException) -> str:
    """A short, single-line description: the task's own exception when Ray wrapped one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    return text if len(text) <= 300 else text[:297] + "..."
