"""What the capture machine hands out and runs: a region while it is open (:class:`OpenRegion`), the capture open now
(:class:`OpenCapture`), the hook calls an event becomes (:class:`Action`, logged by :class:`ActionLog`), and the
error a state the table does not allow raises (:class:`CaptureStateError`). The machine itself is
:mod:`rlprof.runtime.capture_machine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    closed_ns = 0
    """When its exit finished (the capture it closed written): set by the session."""
    step: int | None = None
    configs: Any = None
    module: Any = None
    """The model the region runs (``prof.role(..., module=model)``), for the backends' ``ctx.module``."""

    def __init__(self, role: str, name: str, schedule: Any = None, owner: Any = None):
        self.role = role
        self.name = name
        self.schedule = schedule
        self.owner = owner

    def last_iteration(self) -> int:
        """The last iteration of the open window: the one in progress, else the last one marked."""
        return self.iteration if self.in_iteration else self.iteration - 1


@dataclass(slots=True)
class OpenCapture:
    """The capture open now and who opened it: the machine's one record of what is open.

    Only :attr:`last_step` changes while the capture is open. Not frozen: a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__``, and in discrete mode every region
    entered opens a capture.
    """

    capture: Any
    """The capture object (``make_capture``'s result)."""
    region: OpenRegion | None = None
    """The region (or sampled window of it) that opened the capture and alone closes it; None when a
    step opened it, for :attr:`run`."""
    run: tuple[int, ...] = ()
    """The run of steps a step capture was opened for (``()`` for a region's capture)."""
    last_step: int | None = None
    """The last step that began inside a step capture: the step a late close names."""


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
