"""The capture state machine: the one place that decides when a capture opens and closes.

Every open and close of a capture window — for steps, for role regions and for the sampled windows
inside a region — is decided here and nowhere else; backends only obey ``ctx.opens_capture`` and
``ctx.closes_capture``. Modelled on ``torch.profiler.profile``'s ``action_map``: the machine
classifies what the trainer did into an *event*, looks up ``(who holds the open capture, event)``
in :data:`TRANSITIONS`, and runs the listed operations, each of which updates the state and emits
one :class:`Action` (one hook call for every backend). The rules the table encodes:

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

The machine is pure: no backends, no files, no clocks. It is driven by the process session
(:mod:`rlprof.runtime.session`) and tested as a table (tests/runtime/test_capture_machine.py).
"""

from __future__ import annotations

from typing import Any, Callable

from rlprof.layout import steps_label

# Who holds the open capture.
NONE = "none"
"""No capture is open."""
STEP = "step"
"""An end-to-end capture opened by a step (or a merged run of steps) is open."""
REGION = "region"
"""A discrete capture opened by a region (or one sampled window of it) is open."""

# Events: what the trainer did, classified.
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

TRANSITIONS: dict[tuple[str, str], tuple[str, ...]] = {
    (NONE, BEGIN_E2E): ("open_step",),
    (STEP, BEGIN_E2E): ("close_late", "open_step"),       # the open run was left: close it, open this one
    (STEP, BEGIN_IN_RUN): ("start_step",),
    (NONE, BEGIN_DISCRETE): ("start_step",),
    (NONE, BEGIN_UNPROFILED): (),
    (STEP, BEGIN_UNPROFILED): ("close_late",),            # training left the run for a step it does not profile
    (STEP, END_RUN): ("close_step",),
    (STEP, END_MORE): ("end_step",),
    (NONE, END_DISCRETE): ("end_step",),
    (STEP, ENTER_E2E): ("start_range",),
    (NONE, ENTER_DISCRETE): ("open_region",),
    (REGION, ENTER_DISCRETE): ("start_range",),           # nested: a named range inside, never a capture in a capture
    (REGION, EXIT_HOLDER): ("close_region",),
    (REGION, EXIT): ("stop_range",),
    (STEP, EXIT): ("stop_range",),
    (STEP, ITERATION): ("mark_iteration",),
    (REGION, ITERATION): ("mark_iteration",),
    (NONE, LEAVE): (),
    (STEP, LEAVE): ("close_late",),
}
"""``(holder, event) -> operations``: every transition the machine makes, in one place."""

UNREACHABLE: frozenset[tuple[str, str]] = frozenset({
    (NONE, BEGIN_IN_RUN),        # "in the open run" needs an open run
    (REGION, BEGIN_E2E), (REGION, BEGIN_IN_RUN), (REGION, BEGIN_DISCRETE), (REGION, BEGIN_UNPROFILED),
    (REGION, END_RUN), (REGION, END_MORE), (REGION, END_DISCRETE), (REGION, LEAVE),  # regions exit before a step ends
    (STEP, BEGIN_DISCRETE), (STEP, END_DISCRETE), (REGION, ENTER_E2E), (STEP, ENTER_DISCRETE),  # one mode per process
    (NONE, END_RUN), (NONE, END_MORE), (NONE, ENTER_E2E),  # a profiled end-to-end step always holds a capture
    (NONE, EXIT_HOLDER), (STEP, EXIT_HOLDER), (NONE, EXIT), (NONE, ITERATION),  # no capture: no region inside one
})
"""Pairs the machine never reaches (each for the reason noted); :class:`CaptureStateError` if it did."""


class CaptureStateError(RuntimeError):
    """The machine reached a pair of :data:`UNREACHABLE` (a bug in rlprof's core, never a backend's)."""


class OpenRegion:
    """One region the trainer is inside (``with prof.role(...)``, a decorated call), as the machine sees it.

    ``schedule`` is the role's sampling schedule (None: the whole region is one window). The session
    fills ``start_ns``/``end_ns``, ``owner`` and ``configs`` for its timing records and hook calls.
    Fields that start the same for every region are class attributes (a region is created on the hot
    path of every profiled ``with prof.role(...)``; only what differs is set per instance).
    """

    parent: "OpenRegion | None" = None
    depth = 0
    iteration = 0
    """Iterations marked so far (the index of the next one)."""
    in_iteration = False
    window = False
    """A window of this region is open now (its start_role was sent, its stop_role not yet)."""
    holds = False
    """The open window also opened the open capture (discrete, no capture open when it began)."""
    first = 0
    """First iteration of the open window."""
    capture: str | None = None
    """Id of the first capture this region's windows were in (for its timing record)."""
    sampled: list[int] | None = None
    """``[first, last]`` iteration captured over all its windows, or None."""
    marked = 0
    error: BaseException | None = None
    start_ns = 0
    end_ns = 0
    step: int | None = None
    configs: Any = None

    def __init__(self, role: str, name: str, schedule: Any = None, owner: Any = None):
        self.role = role
        self.name = name
        self.schedule = schedule
        self.owner = owner


class Action:
    """One hook call the machine decided, for every live backend: ``hook`` and the context fields."""

    __slots__ = ("hook", "step", "capture", "opens", "closes", "region", "iterations", "iteration", "error", "ends_step")

    def __init__(self, hook: str, step: int | None, capture: Any, opens: bool = False, closes: bool = False,
                 region: OpenRegion | None = None, iterations: tuple[int, int] | None = None,
                 iteration: int | None = None, error: BaseException | None = None, ends_step: bool = True):
        self.hook = hook
        self.step = step
        self.capture = capture
        self.opens = opens
        self.closes = closes
        self.region = region
        self.iterations = iterations
        self.iteration = iteration
        self.error = error
        self.ends_step = ends_step

    def label(self) -> str:
        """Compact form for tests and logs: ``start_role:actor_update+@step1.actor_update``."""
        what = self.region.name if self.region is not None else self.step
        if self.hook == "iteration_boundary":
            what = f"{what}#{self.iteration}"
        mark = "+" if self.opens else "-" if self.closes else ""
        late = "(late)" if not self.ends_step else ""
        where = f"@{self.capture.capture_id}" if self.capture is not None else ""
        return f"{self.hook}:{what}{mark}{late}{where}"

    def __repr__(self) -> str:
        return f"Action({self.label()})"

    def send(self, hooks: Any) -> None:
        """Deliver this decision to a hooks object (see :class:`CaptureMachine`)."""
        if self.hook == "start_step":
            hooks.start_step(self.step, self.capture, self.opens)
        elif self.hook == "step_boundary":
            hooks.step_boundary(self.step, self.capture, self.closes, self.ends_step)
        elif self.hook == "start_role":
            hooks.start_role(self.region, self.step, self.capture, self.opens, self.iterations)
        elif self.hook == "iteration_boundary":
            hooks.iteration_boundary(self.region, self.step, self.capture, self.iteration)
        else:
            hooks.stop_role(self.region, self.step, self.capture, self.closes, self.iterations, self.error)


class ActionLog:
    """A hooks object that records every decision as an :class:`Action` (for tests and tracing)."""

    def __init__(self) -> None:
        self.actions: list[Action] = []

    def start_step(self, step, capture, opens):
        self.actions.append(Action("start_step", step, capture, opens))

    def step_boundary(self, step, capture, closes, ends_step):
        self.actions.append(Action("step_boundary", step, capture, False, closes, ends_step=ends_step))

    def start_role(self, region, step, capture, opens, iterations):
        self.actions.append(Action("start_role", step, capture, opens, False, region, iterations))

    def iteration_boundary(self, region, step, capture, iteration):
        self.actions.append(Action("iteration_boundary", step, capture, False, False, region, None, iteration))

    def stop_role(self, region, step, capture, closes, iterations, error):
        self.actions.append(Action("stop_role", step, capture, False, closes, region, iterations, None, error))


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
        self.holder = NONE
        self.capture: Any = None
        """The open capture, or None."""
        self.run: tuple[int, ...] = ()
        """The run of steps the open step capture was opened for."""
        self.step: int | None = None
        """The profiled step in progress, or None."""
        self.last_step: int | None = None
        """The last profiled step that began (the step a late close names)."""
        self.stack: list[OpenRegion] = []
        """Open regions, outermost first."""
        self.ranges: list[OpenRegion] = []
        """Regions whose window is open (start_role sent, stop_role not yet), in the order they were
        started: the ranges backends hold, which must close innermost first."""
        self._holder_region: OpenRegion | None = None
        self._capture_last: int | None = None
        """The last step that began inside the open step capture (what a late close names)."""
        self._ids: dict[str, int] = {}
        self._table = {key: tuple(getattr(self, "_op_" + name) for name in operations)
                       for key, operations in TRANSITIONS.items()}
        """:data:`TRANSITIONS` with the operations bound (looked up once, not per event)."""
        self._enter_event = ENTER_DISCRETE if discrete else ENTER_E2E

    # ------------------------------------------------------------------ steps

    def start_step(self, step: int, profiled: bool) -> None:
        """A training step begins (every step, profiled or not: leaving a run early closes it)."""
        if self.step is not None:
            self.end_step()
        if not profiled:
            self._transition(BEGIN_UNPROFILED, step)
            return
        if self.discrete:
            event = BEGIN_DISCRETE
        elif self.holder == STEP and step in self.run:
            event = BEGIN_IN_RUN
        else:
            event = BEGIN_E2E
        self.step = self.last_step = step
        self._transition(event, step)

    def end_step(self) -> None:
        """The profiled step in progress ends (regions still open are exited first)."""
        if self.step is None:
            return
        while self.stack:
            self.exit(self.stack[0])
        step, self.step = self.step, None  # from here on the step has ended (a release sees a late close)
        if self.discrete:
            event = END_DISCRETE
        else:
            event = END_RUN if self.run and step == self.run[-1] else END_MORE
        self._transition(event, step)

    def leave(self) -> None:
        """Stop profiling (finalize): end the step in progress, close whatever is still open."""
        if self.step is not None:
            self.end_step()
        self._transition(LEAVE, self.last_step)

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
            try:  # _transition, inlined for the hot path
                operations = self._table[self.holder, self._enter_event]
            except KeyError:
                self._transition(self._enter_event, region, None)  # raises CaptureStateError
            for operation in operations:
                operation(region, None)

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
            last = region.iteration if region.in_iteration else region.iteration - 1
            if self.ranges[-1] is region:  # the common case: no range started inside it is still open
                event = EXIT_HOLDER if region is self._holder_region else EXIT
                try:  # _transition, inlined for the hot path
                    operations = self._table[self.holder, event]
                except KeyError:
                    self._transition(event, region, last, error)  # raises CaptureStateError
                for operation in operations:
                    operation(region, last, error)
            else:
                self._close_window(region, last, error)
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
            self._transition(ITERATION, region, index)
        else:
            self._close_window(region, index, error)

    def innermost_sampled(self) -> OpenRegion | None:
        for region in reversed(self.stack):
            if region.schedule is not None:
                return region
        return None

    # ------------------------------------------------------------------ what is open

    def release_actions(self) -> list[Action]:
        """The calls that would close everything open now, innermost first, without changing the
        state: what the core sends to a backend that raised, so it can release what it holds."""
        actions = []
        for region in reversed(self.ranges):
            if region.window:
                holds = region is self._holder_region
                last = region.iteration if region.in_iteration else region.iteration - 1
                actions.append(Action("stop_role", self.step, self.capture if self.holder != NONE else None,
                                      False, holds, region, self._iterations(region, last)))
        if self.holder == STEP:
            in_step = self.step is not None
            actions.append(Action("step_boundary", self.step if in_step else self._capture_last, self.capture,
                                  False, True, ends_step=in_step))
        return actions

    @property
    def open_capture_ids(self) -> list[str]:
        return [self.capture.capture_id] if self.capture is not None else []

    # ------------------------------------------------------------------ the table and its operations

    def _transition(self, event: str, *args: Any) -> None:
        try:
            operations = self._table[self.holder, event]
        except KeyError:
            raise CaptureStateError(f"capture machine: no transition for capture held by {self.holder!r} when {event}") from None
        for operation in operations:
            operation(*args)

    def _close_window(self, region: OpenRegion, last: int, error: BaseException | None) -> None:
        # Ranges started after this one close first (a window ending while a region entered inside
        # it still runs, e.g. next_iteration() called in a nested region): ranges stay nested.
        ranges = self.ranges
        while ranges and ranges[-1] is not region:
            inner = ranges[-1]
            self._close_window(inner, inner.iteration if inner.in_iteration else inner.iteration - 1, None)
        self._transition(EXIT_HOLDER if region is self._holder_region else EXIT, region, last, error)

    def _new_capture(self, base: str, steps: tuple[int, ...], regions: tuple[str, ...]) -> Any:
        count = self._ids.get(base, 0)
        self._ids[base] = count + 1
        return self._make_capture(base if count == 0 else f"{base}.{count}", steps, regions)

    def _iterations(self, region: OpenRegion, last: int) -> tuple[int, int] | None:
        return (region.first, max(region.first, last)) if region.schedule is not None else None

    def _op_open_step(self, step: int) -> None:
        run = self._run_of(step)
        seen = tuple(s for s in run if s >= step) or (step,)
        self.capture = self._new_capture(steps_label(seen), seen, ())
        self.run, self.holder, self._capture_last = run, STEP, step
        self._hooks.start_step(step, self.capture, True)

    def _op_start_step(self, step: int) -> None:
        if self.holder == STEP:
            self._capture_last = step
        self._hooks.start_step(step, self.capture, False)

    def _op_end_step(self, step: int) -> None:
        self._hooks.step_boundary(step, self.capture, False, True)

    def _op_close_step(self, step: int) -> None:
        capture, self.capture, self.holder, self.run = self.capture, None, NONE, ()
        self._hooks.step_boundary(step, capture, True, True)

    def _op_close_late(self, step: int | None) -> None:
        capture, self.capture, self.holder, self.run = self.capture, None, NONE, ()
        self._hooks.step_boundary(self._capture_last, capture, True, False)

    def _op_open_region(self, region: OpenRegion, first: int | None) -> None:
        step = self.step
        self.capture = capture = self._new_capture(f"{steps_label((step,))}.{region.name}", (step,), (region.name,))
        self.holder, self._holder_region = REGION, region
        region.holds = region.window = True
        self.ranges.append(region)
        if region.capture is None:
            region.capture = capture.capture_id
        self._hooks.start_role(region, step, capture, True, None if first is None else (first, first))

    def _op_start_range(self, region: OpenRegion, first: int | None) -> None:
        capture = self.capture
        region.window = True
        self.ranges.append(region)
        if region.capture is None and capture is not None:
            region.capture = capture.capture_id
        self._hooks.start_role(region, self.step, capture, False, None if first is None else (first, first))

    def _op_close_region(self, region: OpenRegion, last: int, error: BaseException | None) -> None:
        capture, self.capture, self.holder, self._holder_region = self.capture, None, NONE, None
        if region.schedule is not None or self.ranges[-1] is not region:
            self._window_closed(region, last)
        else:  # the common case, inline: the innermost range of a region without sampling
            region.window = region.holds = False
            self.ranges.pop()
        self._hooks.stop_role(region, self.step, capture, True,
                              (region.first, max(region.first, last)) if region.schedule is not None else None, error)

    def _op_stop_range(self, region: OpenRegion, last: int, error: BaseException | None) -> None:
        if region.schedule is not None or self.ranges[-1] is not region:
            self._window_closed(region, last)
        else:  # the common case, inline: the innermost range of a region without sampling
            region.window = False
            self.ranges.pop()
        self._hooks.stop_role(region, self.step, self.capture, False,
                              (region.first, max(region.first, last)) if region.schedule is not None else None, error)

    def _op_mark_iteration(self, region: OpenRegion, iteration: int) -> None:
        self._hooks.iteration_boundary(region, self.step, self.capture, iteration)

    def _window_closed(self, region: OpenRegion, last: int) -> None:
        region.window = region.holds = False
        ranges = self.ranges
        if ranges[-1] is region:
            ranges.pop()
        else:
            ranges.remove(region)
        if region.schedule is not None:
            last = max(region.first, last)
            if region.sampled is None:
                region.sampled = [region.first, last]
            else:
                region.sampled[1] = last
