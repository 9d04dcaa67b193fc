"""``global_profiler.trigger``: capture a step nobody planned when the run looks wrong.

A trigger watches every step of an armed run (:func:`rlprof.runtime.plan.armed`) at its driver and, when it
fires, has the next step captured on every selected process (:class:`rlprof.runtime.unplanned.Decider`):

* ``slow_step``: a step that took more than this factor times the median of the last ``window`` steps;
* ``late_rank``: a rank that entered a region later than the others (the step metrics' ``late_rank``) by
  more than this fraction of the region's median time;
* ``rollout_tail``: a rollout replica whose tail (from when its running requests fell below half their peak
  to its last request's end: the step metrics' ``rlprof/requests/replica<r>/tail_share``) took more than this
  share of its generate window;
* ``window``: how many earlier steps the median is taken over (and how many must have run before
  ``slow_step`` may fire);
* ``max_captures``: the most captures triggers make in a run (``rlprof capture`` requests are not counted);
* ``cooldown_steps``: after a triggered capture, steps that cannot trigger another.

The capture budgets (``capture_budget_mb``, ``run_budget_gb``) hold for triggered captures like any other.
Absent or ``null``: no trigger.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from rlprof.errors import ErrorList, fail, unknown_key

DEFAULT_WINDOW = 20
DEFAULT_MAX_CAPTURES = 3
DEFAULT_COOLDOWN_STEPS = 10


@dataclass(frozen=True)
class Trigger:
    slow_step: float | None = None
    """A factor > 1, or None: no slow-step trigger."""
    late_rank: float | None = None
    """A fraction > 0 of the region's median time, or None: no late-rank trigger."""
    rollout_tail: float | None = None
    """A share in (0, 1) of a replica's generate window, or None: no rollout-tail trigger."""
    window: int = DEFAULT_WINDOW
    max_captures: int = DEFAULT_MAX_CAPTURES
    cooldown_steps: int = DEFAULT_COOLDOWN_STEPS

    @property
    def enabled(self) -> bool:
        return self.slow_step is not None or self.late_rank is not None or self.rollout_tail is not None

    @property
    def reads_figures(self) -> bool:
        """A trigger on the step metrics' figures (where they reach the driver)."""
        return self.late_rank is not None or self.rollout_tail is not None


FIELDS = tuple(f.name for f in fields(Trigger))
"""The keys of a ``trigger`` mapping."""

ALLOWED = (f"a mapping of slow_step (a factor > 1), late_rank (a fraction > 0), rollout_tail (a share between 0 and 1), "
           f"window (an integer >= 3, default "
           f"{DEFAULT_WINDOW}), max_captures (an integer >= 1, default {DEFAULT_MAX_CAPTURES}), cooldown_steps "
           f"(an integer >= 0, default {DEFAULT_COOLDOWN_STEPS}), or null")


def parse_trigger(raw: Any, key: str) -> Trigger | None:
    """Read a ``trigger`` mapping; None (absent, ``null``, or none of ``slow_step``, ``late_rank``, ``rollout_tail`` set):
    no trigger."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise fail(key, raw, ALLOWED)
    values: dict[str, Any] = {}
    mistakes = ErrorList()  # every mistake inside the mapping at once, not only the first
    for name, value in raw.items():
        if name == "_target_" or value is None:
            continue
        if name not in FIELDS:
            mistakes.add(unknown_key(key, name, FIELDS))
        else:
            values[name] = mistakes.attempt(_read, name, value, f"{key}.{name}")
    mistakes.raise_if_any()
    trigger = Trigger(**values)
    return trigger if trigger.enabled else None


def too_short(trigger: Trigger | None, steps: int) -> str | None:
    """Why ``slow_step`` can capture nothing in a run of ``steps`` steps, or None: it judges a step against the
    median of the ``window`` steps before it, so the first step it can judge is ``window + 1``, and it captures
    the step after. What ``rlprof check`` (given the run's length) and ``rlprof demo`` warn of, before the run."""
    if trigger is None or trigger.slow_step is None or steps >= trigger.window + 2:
        return None
    fix = f"set global_profiler.trigger.window={steps - 2} or lower, or " if steps - 2 >= 3 else ""
    return (f"global_profiler.trigger.slow_step needs {trigger.window} steps of history (window) before it judges a step, "
            f"and captures the step after it; this run has {steps}, so slow_step captures nothing "
            f"({fix}run at least {trigger.window + 2} steps)")


def _read(name: str, value: Any, key: str) -> Any:
    number = not isinstance(value, bool) and isinstance(value, (int, float))
    if name == "slow_step":
        if not number or not value > 1 or value != value or value == float("inf"):
            raise fail(key, value, "a factor greater than 1 (1.5: a step 1.5x the median of the last window steps), or null")
        return float(value)
    if name == "late_rank":
        if not number or not value > 0 or value != value or value == float("inf"):
            raise fail(key, value, "a fraction greater than 0 of the region's median time (0.2: 20% of it), or null")
        return float(value)
    if name == "rollout_tail":
        if not number or not 0 < value < 1:
            raise fail(key, value, "a share between 0 and 1 of a replica's generate window (0.5: its tail took more than "
                                   "half of it), or null")
        return float(value)
    least = {"window": 3, "max_captures": 1, "cooldown_steps": 0}[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise fail(key, value, f"an integer >= {least}")
    return value
