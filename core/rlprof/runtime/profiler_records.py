"""What a framework tells a :class:`~rlprof.runtime.profiler.Profiler` beside its regions: a failure or warning of
something rlprof drives outside the backends' hooks, a wait training paid for profiling, a region timed by the
caller, the rollout's request records and the tokens a region processed.

Why apart from the Profiler: these are one-line hand-overs (to the process session's manifest, or appended to the
step timings on their way to the step metrics) that frameworks' integrations call, each a few lines of docstring
and code; the Profiler's own file keeps the step, capture and finalize logic it is read for. A mixin, since each
reads the Profiler's session, timings and plan: ``self._session`` (None when the process does not profile),
``self._times`` (None when no hosted role is timed), ``self.plan``, ``self.run`` and ``self._tokens``.
"""

from __future__ import annotations

from typing import Any, Iterable

from rlprof.layout import safe_name


class FrameworkRecords:
    """The ``record_*`` methods of :class:`~rlprof.runtime.profiler.Profiler` (see the module doc). None raises into
    training; each does nothing when this process does not profile, or the role is not timed."""

    _session: Any
    _times: Any
    _tokens: Any
    plan: Any
    run: Any

    def record_error(self, source: str, hook: str, error: str, *, kind: str = "engine", **details: Any) -> None:
        """Record a failure of something rlprof drives outside the backends' hooks (a rollout engine's
        profiler, see :mod:`rlprof.integrations.engines.replica`) as an ``error`` record of this process's
        manifest, which ``rlprof report`` and the verdict show. Does nothing when this process does not
        profile. Never raises into training."""
        if self._session is not None:
            self._session.record_error(source, hook, kind, error, **details)

    def record_warning(self, source: str, message: str, **details: Any) -> None:
        """Record a warning (kind ``backend``, from ``source``) in this process's manifest, for what
        rlprof drives outside the backends' hooks (an engine setting it cannot honour). Does nothing
        when this process does not profile."""
        if self._session is not None:
            self._session.record_warning(source, message, **details)

    def record_wait(self, source: str, start_ns: int, end_ns: int, **details: Any) -> None:
        """Record that training waited ``[start_ns, end_ns]`` for profiling's own work outside a hook
        (a rollout replica's export still running when the next generate came): a ``profiling_wait``
        record, so the wait counts as profiling's cost instead of hiding in the caller's time. Does
        nothing when this process does not profile."""
        if self._session is not None:
            self._session.record_wait(source, start_ns, end_ns, **details)

    def record_timing(self, role: str, stage: str | None, start_ns: int, end_ns: int) -> None:
        """A region of ``role`` that ran from ``start_ns`` to ``end_ns`` (``time.time_ns()``) outside a
        ``with prof.role(...)``: a rollout replica's server generating for requests it served one by one.
        Nothing when the role is not timed."""
        times = self._times
        if times is not None and role in self.plan.timed:
            times.done.append((role, safe_name(f"{role}_{stage}" if stage else role), start_ns, end_ns))

    def record_requests(self, records: Iterable[Any]) -> None:
        """Rollout requests this process served (:class:`rlprof.request_records.RequestRecord`, times on the run's
        clock), handed on with its step timings to the run's driver, which keeps them and their figures
        (docs/engines.md, "Request records"). Call before the region that served them ends (then a step's
        records are complete when its timings are). One list extend; nothing when the rollout is not timed."""
        times = self._times
        if times is not None and "rollout" in self.plan.timed:
            times.requests.extend(records)

    def record_tokens(self, role: str, stage: str | None, tokens: int, *, model: Any = None, train: bool = False,
                      sequences: Any = (), flops: float | None = None, formula: str | None = None) -> None:
        """``role``'s region ``stage`` processed ``tokens`` tokens in this step: its analytic FLOPs (``model``'s by
        :mod:`rlprof.model_flops`, ``train``: forward and backward; ``sequences``: each sequence's length, for
        attention; or ``flops`` by a ``formula`` of the caller's) give the step's tokens/s, model TFLOP/s and MFU
        over the region's window (:mod:`rlprof.runtime.tokens`). Call it at or after the region's end, in the step.
        Nothing when the role is not timed."""
        times = self._times
        if times is not None and role in self.plan.timed:
            if self._tokens is None:
                from rlprof.runtime.tokens import TokenCounter

                self._tokens = TokenCounter(self.run)
            self._tokens.record(times, role, stage, tokens, model=model, train=train, sequences=sequences,
                                flops=flops, formula=formula)
