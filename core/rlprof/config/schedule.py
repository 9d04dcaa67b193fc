"""Sampling inside a role region: which iterations (micro-batches, forward passes, decode steps)
are captured. One rule for every backend; no backend contains schedule logic.

Semantics follow ``torch.profiler.schedule`` so verl's ``tool_config.torch.schedule`` and the
``torch_npu.profiler.schedule`` examples in the Ascend guide mean the same here:

* the first ``skip_first`` iterations are skipped;
* then cycles of ``wait`` + ``warmup`` + ``active`` iterations follow; only the ``active`` ones are
  captured. ``warmup`` iterations are treated exactly like ``wait`` (not captured): rlprof's
  backends have no warm-up phase; the knob exists so torch/verl configs keep their meaning;
* ``repeat`` cycles are run; ``repeat: 0`` repeats until the region ends (torch's meaning).
  When ``profiler.schedule`` leaves ``repeat`` out it defaults to 1, so ``{active: 1}`` is "the
  first iteration only";
* ``active: 0`` switches sampling off: the whole region is one window.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from rlprof.errors import ConfigError, fail, unknown_key

@dataclass(frozen=True)
class Schedule:
    skip_first: int = 0
    wait: int = 0
    warmup: int = 0
    active: int = 0
    repeat: int = 1

    @property
    def enabled(self) -> bool:
        return self.active > 0

    def is_active(self, iteration: int) -> bool:
        """True when iteration ``iteration`` (0-based, counted inside one region) is captured."""
        if iteration < self.skip_first:
            return False
        cycle = self.wait + self.warmup + self.active
        index, position = divmod(iteration - self.skip_first, cycle)
        if self.repeat and index >= self.repeat:
            return False
        return position >= self.wait + self.warmup

    def window_end(self, iteration: int) -> bool:
        """True when ``iteration`` is the last active one of its window."""
        return self.is_active(iteration) and not self.is_active(iteration + 1)

    def windows(self) -> int | None:
        """How many active windows a long enough region has; None when unbounded (repeat 0)."""
        return self.repeat or None

    def captured(self, iterations: int) -> list[int]:
        """The captured iteration indices of a region with ``iterations`` iterations."""
        return [i for i in range(iterations) if self.is_active(i)]


FIELDS = tuple(f.name for f in fields(Schedule))
"""The keys of a ``schedule`` mapping: :class:`Schedule`'s fields."""


def parse_schedule(raw: Any, key: str, *, default_repeat: int = 1) -> Schedule | None:
    """Parse a ``schedule`` mapping; None (or ``active: 0``) means no sampling."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise fail(key, raw, "a mapping with skip_first, wait, warmup, active, repeat (non-negative ints)")
    values: dict[str, int] = {"repeat": default_repeat}
    for name, value in raw.items():
        if name == "_target_":
            continue
        if name not in FIELDS:
            raise unknown_key(key, name, FIELDS)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(f"{key}.{name}", value, "a non-negative integer")
        values[name] = value
    schedule = Schedule(**values)
    return schedule if schedule.enabled else None


def token_window(start: Any, end: Any, key: str) -> Schedule | None:
    """verl's rollout ``profile_token_start/end``: capture decode iterations [start, end)."""
    if start is None and end is None:
        return None
    for name, value in (("profile_token_start", start), ("profile_token_end", end)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fail(f"{key}.{name}", value, "a non-negative integer (both start and end must be set)")
    if end <= start:
        raise ConfigError(f"{key}.profile_token_end: got {end!r}; allowed: an integer greater than profile_token_start ({start})", key=key)
    return Schedule(wait=start, active=end - start, repeat=1)
