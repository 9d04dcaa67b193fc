"""What ``prof.role(...)`` and ``prof.iteration()`` return: one region object per (role, stage) of a Profiler.

A region is in one of three states, each a class sharing one layout (:class:`ProfiledRegion`, profiled now:
entering tells the process session; :class:`TimedRegion`, timed for the step metrics only; :class:`IdleRegion`,
neither). The Profiler sets a region's state at step start and end (``Profiler._set_live``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from rlprof.layout import safe_name
from rlprof.runtime.step_timings import now_ns as _now

class ProfiledRegion:
    """The result of ``prof.role(role, stage)`` while its role is profiled now: a context manager
    and a decorator, one object per (role, stage) of a Profiler. See :class:`TimedRegion` and
    :class:`IdleRegion` for the other states; ``live`` (profiled) and ``enters`` (does something on
    entry: profiled or timed) tell them apart."""

    __slots__ = ("_prof", "role", "region", "_open", "_schedule", "_configs", "module", "_done")
    live = True
    enters = True

    def __init__(self, prof: Any, role: str, stage: str | None, *, sampled: bool):  # prof: its Profiler
        self._prof = prof
        self.role = role
        self.region = safe_name(f"{role}_{stage}" if stage else role)
        self._open: list = []
        """The session's records of this region's entries still open (nested or re-entered: a stack)."""
        planned = prof.plan.roles.get(role) if sampled else None
        self._schedule = planned.schedule if planned is not None else None
        self._configs = prof.tool_configs.get(role)
        """The role's sampling schedule and validated tool configs, looked up once, not per entry."""
        self.module: Any = None
        """The model this region runs (``prof.role(..., module=model)``), handed to backends as
        ``RoleContext.module``; the last one given wins. None: the caller named none."""
        times = prof._times
        self._done = times.done if times is not None and role in prof.plan.timed else None
        """The list this region's timings go to (its Profiler's :class:`~rlprof.runtime.step_timings.RegionTimes`),
        or None when its role is not timed (``global_profiler.step_metrics``, docs/analysis.md)."""

    def __enter__(self):
        prof = self._prof
        self._open.append(prof._session.enter(prof, self.role, self.region, self._schedule, self._configs, self.module))
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._open:
            opened = self._open.pop()
            self._prof._session.exit(opened, exc)
            if self._done is not None and opened.end_ns:  # a profiled step's region is timed too: the session's own times
                self._done.append((self.role, self.region, opened.start_ns, opened.end_ns))
        return False

    def __call__(self, fn: Callable) -> Callable:
        region = self

        @functools.wraps(fn)
        def profiled(*args, **kwargs):
            if region.enters:  # a class attribute: follows the region's class, set by Profiler._set_live
                with region:
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)

        return profiled


class TimedRegion(ProfiledRegion):
    """The same region object while its role is timed but not profiled (an unprofiled step, an unselected
    rank, between steps): entering takes the time, leaving appends ``(role, region, start_ns, end_ns)`` to
    its Profiler's timings (:mod:`rlprof.runtime.step_timings`), which a thread of rlprof sends on. No hook,
    no lock, no record: two clock reads, a list append and a tuple (bench/bench_step_metrics.py)."""

    __slots__ = ()
    live = False

    def __enter__(self):
        self._open.append(_now())
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._open:
            start = self._open.pop()
            if start.__class__ is int:  # not an OpenRegion left by a profiled step that ended inside it
                self._done.append((self.role, self.region, start, _now()))
        return False


class IdleRegion(ProfiledRegion):
    """The same region object while its role is not profiled (unselected rank, step or role).

    The Profiler switches a region's class between :class:`ProfiledRegion` and this one at step start and
    end (:meth:`Profiler._set_live`), so an idle ``with prof.role(...)`` runs no Python code of ours:
    ``__enter__``/``__exit__`` are C callables that are not descriptors, so the with-statement calls
    them without ``self`` — ``NoneType()`` returns None, ``"".format(*exc_info)`` returns ``""``
    (falsy: exceptions propagate). The ``as`` target of an idle region is None.

    Why a class switch and not a plainer ``if self.live:`` inside ``__enter__``/``__exit__``: measured
    with bench/bench_core.py (same host, interleaved repeats), the plain region cost 1.52x and 1.60x the
    cheapest Python context manager in two runs, over the 1.3x the idle path may cost: ``prof.role(...)``
    is a Python call the floor does not make, and two Python-level methods come on top of it. The class
    switch costs 0.96-0.99x. The decorator needs no such trick: testing ``live`` costs 1.08-1.20x the
    cheapest pass-through decorator, so decorated functions simply test it.
    """

    __slots__ = ()
    live = False
    enters = False
    __enter__ = type(None)
    __exit__ = "".format


class Iteration:
    """The result of ``prof.iteration()``: marks one iteration of the innermost open sampled region."""

    __slots__ = ("_prof",)

    def __init__(self, prof: Any):
        self._prof = prof

    def __enter__(self):
        session = self._prof._session
        if session is not None and self._prof._live:
            session.iteration_begins()
        return self

    def __exit__(self, exc_type, exc, tb):
        session = self._prof._session
        if session is not None and self._prof._live:
            session.iteration_ends(exc)  # an iteration that raised ends its window with the error
        return False
