"""The capture state machine: the one place that decides when a capture opens and closes.

Every open and close of a capture window — for steps, for role regions and for the sampled windows
inside a region — is decided here and nowhere else; backends only obey ``ctx.opens_capture`` and
``ctx.closes_capture``. Modelled on ``torch.profiler.profile``'s ``action_map``: the machine
classifies what the trainer did into an :class:`Event`, looks up ``(who holds the open capture,
event)`` in :data:`TRANSITIONS`, and runs the listed operations, each of which updates the state and
emits one :class:`Action` (one hook call for every backend). That lookup (``_transition``) is the only
way the state changes. The rules the table encodes:

* **Never a capture inside a capture**, in either mode: a region entered while a capture is open
  is a named range inside it (``(REGION, ENTER_DISCRETE) -> start_range``).
* **A close only for a capture that was opened**: only the holder of the open capture (the step,
  or the region/window that opened it) closes it; nothing else emits ``closes_capture``.
* **A run of continuous steps entered in the middle opens at the first step seen**
  (``(NONE, BEGIN_E2E) -> open_step`` whatever the step's place in its run).
* **A run left early is still closed**: when training leaves a merged run before its last step (it
  skips to another step, an unprofiled one, or finalizes), the capture is closed by a
  ``step_boundary`` whose ``ends_step`` is False (``close_late``).
* A step that begins while another is open first ends that one; a step that ends with regions still
  open first exits them (innermost first), as does a region exiting with regions open inside it.

The state has one owner per piece: the open capture and who opened it live in one
:class:`OpenCapture` record (``CaptureMachine.open_capture``, None when nothing is open; the holder is
derived from it), the profiled step in progress in ``CaptureMachine.step``, the open regions in
``stack`` and the windows backends hold in ``ranges``.

The machine is pure: no backends, no files, no clocks. It is driven by the process session
(:mod:`rlprof.runtime.session`) and tested as a table (tests/runtime/test_capture_machine.py).
"""

from __future__ import annotations

from enum import Enum, unique
from typing import Any, Callable

from rlprof.layout import steps_label
from rlprof.runtime.capture_state import (Action, ActionLog, CaptureStateError, OpenCapture,  # noqa: F401  (re-exported)
                                          OpenRegion)

# Both enumerations mix in str: a (holder, event) key then hashes at C speed, where Enum's own
# __hash__ is Python code, and the lookup runs for every region a trainer enters and leaves. For the
# same reason the hot path reads the members it needs from the names bound below the classes: on
# Python 3.11 every ``Event.X`` read goes through EnumType's Python-level __getattr__ hook (~50 ns).


@unique
class Holder(str, Enum):
    """Who holds the open capture."""

    NONE = "none"
    """No capture is open."""
    STEP = "step"
    """An end-to-end capture opened by a step (or a merged run of steps) is open."""
    REGION = "region"
    """A discrete capture opened by a region (or one sampled window of it) is open."""


@unique
class Event(str, Enum):
    """What the trainer did, classified; the value is the sentence error messages show."""

    BEGIN_E2E = "a profiled step begins outside any open run (end-to-end)"
    BEGIN_IN_RUN = "a profiled step continues the open run of steps (end-to-end)"
    BEGIN_DISCRETE = "a profiled step begins (discrete)"
    BEGIN_UNPROFILED = "a step that is not profiled begins"
    END_RUN = "a profiled step ends, the last of its run (end-to-end)"
    END_MORE = "a profiled step ends, its run goes on (end-to-end)"
    END_DISCRETE = "a profiled step ends (discrete)"
    ENTER_E2E = "a region or sampled window begins (end-to-end)"
    ENTER_DISCRETE = "a region or sampled window begins (discrete)"
    EXIT_HOLDER = "the region or window that opened the open capture ends"
    EXIT = "a region or window ends inside a capture it did not open"
    ITERATION = "an iteration ends inside a window that goes on"
    LEAVE = "the process stops profiling between steps (finalize)"


_NONE, _STEP, _REGION = Holder.NONE, Holder.STEP, Holder.REGION
_EXIT, _EXIT_HOLDER = Event.EXIT, Event.EXIT_HOLDER


class CaptureMachine:
    """The capture state of one process (shared by colocated Profilers).

    :param discrete: one capture per region (True) or per step / merged run of steps (False).
    :param run_of: ``step -> the run of steps it belongs to`` (``(1, 2, 3)`` with continuous merging,
        ``(step,)`` otherwise).
    :param make_capture: ``(capture_id, steps, regions) -> capture`` (an object with ``capture_id``).
    :param hooks: receives each decision, in order, right after the state changed for it, as one call
        of ``start_step(step, capture, opens)``, ``step_boundary(step, capture, closes, ends_step)``,
        ``start_role(region, step, capture, opens, iterations)``, ``iteration_boundary(region, step,
        capture, iteration)`` or ``stop_role(region, step, capture, closes, iterations, error)``: the
        process session (which calls the backends), or an :class:`ActionLog`.
    """

    def __init__(self, *, discrete: bool, run_of: Callable[[int], tuple[int, ...]],
                 make_capture: Callable[[str, tuple[int, ...], tuple[str, ...]], Any], hooks: Any):
        self.discrete = discrete
        self._run_of = run_of
        self._make_capture = make_capture
        self._hooks = hooks
        self.open_capture: OpenCapture | None = None
        """The open capture and who opened it, or None."""
        self.step: int | None = None
        """The profiled step in progress, or None."""
        self.stack: list[OpenRegion] = []
        """Open regions, outermost first."""
        self.ranges: list[OpenRegion] = []
        """Regions whose window is open (start_role sent, stop_role not yet), in the order they were
        started: the ranges backends hold, which must close innermost first."""
        self._ids: dict[str, int] = {}
        self._enter_event = Event.ENTER_DISCRETE if discrete else Event.ENTER_E2E
        """The event a region or window beginning is, fixed by the mode (looked up once: it is hot)."""

    @property
    def holder(self) -> Holder:
        """Who holds the open capture (derived from :attr:`open_capture`)."""
        opened = self.open_capture
        return _NONE if opened is None else _STEP if opened.region is None else _REGION

    # ------------------------------------------------------------------ steps

    def start_step(self, step: int, profiled: bool) -> None:
        """A training step begins (every step, profiled or not: leaving a run early closes it)."""
        if self.step is not None:
            self.end_step()
        if not profiled:
            self._transition(Event.BEGIN_UNPROFILED, step)
            return
        if self.discrete:
            event = Event.BEGIN_DISCRETE
        elif self.holder is Holder.STEP and step in self.open_capture.run:
            event = Event.BEGIN_IN_RUN
        else:
            event = Event.BEGIN_E2E
        self.step = step
        self._transition(event, step)

    def end_step(self) -> None:
        """The profiled step in progress ends (regions still open are exited first)."""
        if self.step is None:
            return
        while self.stack:
            self.exit(self.stack[0])
        step, self.step = self.step, None  # from here on the step has ended (a release sees a late close)
        if self.discrete:
            event = Event.END_DISCRETE
        else:
            run = self.open_capture.run if self.open_capture is not None else ()
            event = Event.END_RUN if run and step == run[-1] else Event.END_MORE
        self._transition(event, step)

    def leave(self) -> None:
        """Stop profiling (finalize): end the step in progress, close whatever is still open."""
        if self.step is not None:
            self.end_step()
        self._transition(Event.LEAVE)

    # ------------------------------------------------------------------ regions and iterations

    def enter(self, region: OpenRegion) -> None:
        """The trainer enters ``region``; a region without schedule is one window from here."""
        stack = self.stack
        if stack:
            region.parent = stack[-1]
            region.depth = len(stack)
        region.step = self.step
        stack.append(region)
        if region.schedule is None:
            self._transition(self._enter_event, region, None)

    def exit(self, region: OpenRegion, error: BaseException | None = None) -> None:
        """The trainer leaves ``region`` (``error``: what it raised). Regions still open inside it
        are exited first, innermost first."""
        stack = self.stack
        if not stack or stack[-1] is not region:
            if region not in stack:
                return
            while stack[-1] is not region:
                self.exit(stack[-1])
        if error is not None:
            region.error = error
        if region.window:
            self._close_window(region, error)
        stack.pop()

    def iteration_begins(self) -> None:
        """An iteration of the innermost sampled region begins; opens a window when it is active."""
        region = self.innermost_sampled()
        if region is None:
            return
        region.in_iteration = True
        if not region.window and region.schedule.is_active(region.iteration):
            region.first = region.iteration
            self._transition(self._enter_event, region, region.iteration)

    def iteration_ends(self, error: BaseException | None = None) -> None:
        """The iteration in progress of the innermost sampled region ends (``error``: it raised; when
        that ends the window, the window's ``stop_role`` carries it)."""
        region = self.innermost_sampled()
        if region is None or not region.in_iteration:
            return
        index = region.iteration
        region.iteration += 1
        region.marked += 1
        region.in_iteration = False
        if not region.window:
            return
        if region.schedule.is_active(index + 1):
            self._transition(Event.ITERATION, region, index)
        else:
            self._close_window(region, error)

    def innermost_sampled(self) -> OpenRegion | None:
        for region in reversed(self.stack):
            if region.schedule is not None:
                return region
        return None

    # ------------------------------------------------------------------ what is open

    def release_actions(self) -> list[Action]:
        """The calls that would close everything open now, innermost first, without changing the
        state: what the core sends to a backend that raised, so it can release what it holds."""
        opened = self.open_capture
        capture = opened.capture if opened is not None else None
        actions = []
        for region in reversed(self.ranges):
            if region.window:
                actions.append(Action("stop_role", self.step, capture, False, self._opened_by(region), region,
                                      self._iterations(region)))
        if self.holder is Holder.STEP:
            in_step = self.step is not None
            actions.append(Action("step_boundary", self.step if in_step else opened.last_step, capture,
                                  False, True, ends_step=in_step))
        return actions

    @property
    def open_capture_ids(self) -> list[str]:
        return [self.open_capture.capture.capture_id] if self.open_capture is not None else []

    # ------------------------------------------------------------------ the table and its operations

    def _transition(self, event: Event, subject: Any = None, detail: Any = None) -> None:
        """Run the operations :data:`TRANSITIONS` lists for ``(holder, event)``: the only way the state changes.

        Every operation takes the event's ``subject`` (the step, or the region) and one ``detail`` (a
        window's first iteration, the iteration marked, or what a region raised): one fixed signature,
        since a call with ``*args`` costs twice as much and this runs for every region.
        """
        try:
            operations = TRANSITIONS[self.holder, event]
        except KeyError:
            raise CaptureStateError(f"capture machine: no transition for capture held by "
                                    f"{self.holder.value!r} when {event.value}") from None
        for operation in operations:
            operation(self, subject, detail)

    def _opened_by(self, region: OpenRegion) -> bool:
        """``region`` (or its window) opened the open capture, so its exit closes it."""
        opened = self.open_capture
        return opened is not None and opened.region is region

    def _close_window(self, region: OpenRegion, error: BaseException | None) -> None:
        # Ranges started after this one close first (a window ending while a region entered inside
        # it still runs, e.g. next_iteration() called in a nested region): ranges stay nested.
        ranges = self.ranges
        while ranges and ranges[-1] is not region:
            self._close_window(ranges[-1], None)
        self._transition(_EXIT_HOLDER if self._opened_by(region) else _EXIT, region, error)

    def _new_capture(self, base: str, steps: tuple[int, ...], regions: tuple[str, ...]) -> Any:
        count = self._ids.get(base, 0)
        self._ids[base] = count + 1
        return self._make_capture(base if count == 0 else f"{base}.{count}", steps, regions)

    @staticmethod
    def _iterations(region: OpenRegion) -> tuple[int, int] | None:
        """``(first, last)`` iteration of ``region``'s open window (a sampled region), else None."""
        if region.schedule is None:
            return None
        return region.first, max(region.first, region.last_iteration())

    # Operations: called only through TRANSITIONS (by _transition), each with the event's arguments.

    def _op_open_step(self, step: int, _: None) -> None:
        run = self._run_of(step)
        seen = tuple(s for s in run if s >= step) or (step,)
        capture = self._new_capture(steps_label(seen), seen, ())
        self.open_capture = OpenCapture(capture, run=run, last_step=step)
        self._hooks.start_step(step, capture, True)

    def _op_start_step(self, step: int, _: None) -> None:
        opened = self.open_capture
        if opened is not None:  # a step of the open run (discrete: no capture is open between regions)
            opened.last_step = step
        self._hooks.start_step(step, opened.capture if opened is not None else None, False)

    def _op_end_step(self, step: int, _: None) -> None:
        opened = self.open_capture
        self._hooks.step_boundary(step, opened.capture if opened is not None else None, False, True)

    def _op_close_step(self, step: int, _: None) -> None:
        opened, self.open_capture = self.open_capture, None
        self._hooks.step_boundary(step, opened.capture, True, True)

    def _op_close_late(self, step: int | None, _: None) -> None:
        # ``step`` is the step that begins (if any), not the one the close names: the run already
        # ended with the last step seen inside it.
        opened, self.open_capture = self.open_capture, None
        self._hooks.step_boundary(opened.last_step, opened.capture, True, False)

    def _op_open_region(self, region: OpenRegion, first: int | None) -> None:
        step = self.step
        capture = self._new_capture(f"{steps_label((step,))}.{region.name}", (step,), (region.name,))
        self.open_capture = OpenCapture(capture, region=region)
        region.window = True
        self.ranges.append(region)
        if region.capture is None:
            region.capture = capture.capture_id
        self._hooks.start_role(region, step, capture, True, None if first is None else (first, first))

    def _op_start_range(self, region: OpenRegion, first: int | None) -> None:
        capture = self.open_capture.capture
        region.window = True
        self.ranges.append(region)
        if region.capture is None:
            region.capture = capture.capture_id
        self._hooks.start_role(region, self.step, capture, False, None if first is None else (first, first))

    def _op_close_region(self, region: OpenRegion, error: BaseException | None) -> None:
        opened, self.open_capture = self.open_capture, None
        self._hooks.stop_role(region, self.step, opened.capture, True, self._window_closed(region), error)

    def _op_stop_range(self, region: OpenRegion, error: BaseException | None) -> None:
        self._hooks.stop_role(region, self.step, self.open_capture.capture, False, self._window_closed(region), error)

    def _op_mark_iteration(self, region: OpenRegion, iteration: int) -> None:
        self._hooks.iteration_boundary(region, self.step, self.open_capture.capture, iteration)

    def _window_closed(self, region: OpenRegion) -> tuple[int, int] | None:
        """Take ``region``'s window off :attr:`ranges` and add it to the region's sampled iterations;
        the window's ``(first, last)`` iteration (a sampled region), else None."""
        region.window = False
        ranges = self.ranges
        if ranges[-1] is region:
            ranges.pop()
        else:
            ranges.remove(region)
        if region.schedule is None:  # most regions: no iterations to note (and one call less for them)
            return None
        iterations = self._iterations(region)
        if region.sampled is None:
            region.sampled = list(iterations)
        else:
            region.sampled[1] = iterations[1]
        return iterations


_M = CaptureMachine  # the table holds the operations themselves; _transition calls each with the machine
TRANSITIONS: dict[tuple[Holder, Event], tuple[Callable[..., None], ...]] = {
    (Holder.NONE, Event.BEGIN_E2E): (_M._op_open_step,),
    (Holder.STEP, Event.BEGIN_E2E): (_M._op_close_late, _M._op_open_step),  # the open run was left: close it, open this one
    (Holder.STEP, Event.BEGIN_IN_RUN): (_M._op_start_step,),
    (Holder.NONE, Event.BEGIN_DISCRETE): (_M._op_start_step,),
    (Holder.NONE, Event.BEGIN_UNPROFILED): (),
    (Holder.STEP, Event.BEGIN_UNPROFILED): (_M._op_close_late,),  # training left the run for a step it does not profile
    (Holder.STEP, Event.END_RUN): (_M._op_close_step,),
    (Holder.STEP, Event.END_MORE): (_M._op_end_step,),
    (Holder.NONE, Event.END_DISCRETE): (_M._op_end_step,),
    (Holder.STEP, Event.ENTER_E2E): (_M._op_start_range,),
    (Holder.NONE, Event.ENTER_DISCRETE): (_M._op_open_region,),
    (Holder.REGION, Event.ENTER_DISCRETE): (_M._op_start_range,),  # nested: a named range inside, never a capture in a capture
    (Holder.REGION, Event.EXIT_HOLDER): (_M._op_close_region,),
    (Holder.REGION, Event.EXIT): (_M._op_stop_range,),
    (Holder.STEP, Event.EXIT): (_M._op_stop_range,),
    (Holder.STEP, Event.ITERATION): (_M._op_mark_iteration,),
    (Holder.REGION, Event.ITERATION): (_M._op_mark_iteration,),
    (Holder.NONE, Event.LEAVE): (),
    (Holder.STEP, Event.LEAVE): (_M._op_close_late,),
}
"""``(holder, event) -> operations``: every transition the machine makes, in one place, and the only
path to them (:meth:`CaptureMachine._transition` calls each operation with the machine and the event's
arguments)."""
del _M

UNREACHABLE: frozenset[tuple[Holder, Event]] = frozenset({
    (Holder.NONE, Event.BEGIN_IN_RUN),  # "in the open run" needs an open run
    *((Holder.REGION, e) for e in (Event.BEGIN_E2E, Event.BEGIN_IN_RUN, Event.BEGIN_DISCRETE, Event.BEGIN_UNPROFILED,
                                   Event.END_RUN, Event.END_MORE, Event.END_DISCRETE, Event.LEAVE)),  # regions exit before a step ends
    (Holder.STEP, Event.BEGIN_DISCRETE), (Holder.STEP, Event.END_DISCRETE),  # one mode per process
    (Holder.REGION, Event.ENTER_E2E), (Holder.STEP, Event.ENTER_DISCRETE),  # one mode per process
    (Holder.NONE, Event.END_RUN), (Holder.NONE, Event.END_MORE), (Holder.NONE, Event.ENTER_E2E),  # a profiled end-to-end step always holds a capture
    (Holder.NONE, Event.EXIT_HOLDER), (Holder.NONE, Event.EXIT), (Holder.NONE, Event.ITERATION),  # no capture: no region inside one
    (Holder.STEP, Event.EXIT_HOLDER),  # a step's capture was opened by no region
})
"""Pairs the machine never reaches (each for the reason noted); :class:`CaptureStateError` if it did."""
