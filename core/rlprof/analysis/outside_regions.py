"""Where a step's time outside every region went: the gaps no region covers, each with its neighbours, and the
driver's own phases that hold them (:mod:`rlprof.analysis.anatomy`'s "(outside regions)")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GAP_FLOOR_MS = 0.1
"""Gaps shorter than this are noise between two calls, not named."""

@dataclass
class Gap:
    """A stretch of a step that no region covers (module doc, "What outside regions holds")."""

    ms: float
    offset_ms: float
    """Where it begins, from the step window's start."""
    after: str | None
    """The region that ended last before it: ``"rank 0 actor_update"``; None at the window's start."""
    before: str | None
    """The region that began first after it; None at the window's end."""

    def line(self) -> str:
        where = [f"after {self.after}"] if self.after else ["at the step's start"]
        where += [f"before {self.before}"] if self.before else ["at the step's end"]
        return f"{self.ms:.1f} ms {', '.join(where)}"

    def as_dict(self) -> dict[str, Any]:
        return {"ms": _ms(self.ms), "offset_ms": _ms(self.offset_ms), "after": self.after, "before": self.before}


def gaps_outside(regions: list[tuple[int, int, str]], writing: list[tuple[int, int]], start: int, end: int) -> list[Gap]:
    """Every stretch of ``[start, end]`` that neither ``regions`` nor ``writing`` cover, in time order,
    each with the region that ended last before it and the one that began first after it (a capture
    written after a region covers time, and leaves that region the neighbour)."""
    spans = sorted([*regions, *((a, b, None) for a, b in writing)])  # writing covers; its region is the neighbour
    found: list[Gap] = []
    reached, last = start, None
    for begin, finish, label in [*spans, (end, end, None)]:
        begin = min(max(begin, start), end)
        if begin > reached:
            found.append(Gap((begin - reached) / 1e6, (reached - start) / 1e6, last, label if begin < end else None))
        if finish >= reached:
            reached = max(reached, min(finish, end))
            last = label or last
    return found


def by_phase(phases: list[tuple[int, int, str, str]], gaps: list[Gap], start: int) -> list[tuple[str, float]]:
    """The gaps' time per driver phase: innermost (shortest) phase first, then what is left to the next;
    ``(no phase)`` for what none covers. Empty without phases."""
    if not phases:
        return []
    left = [(start + g.offset_ms * 1e6, start + (g.offset_ms + g.ms) * 1e6) for g in gaps]
    shares: dict[str, float] = {}
    for begin, finish, name, _ in sorted(phases, key=lambda p: p[1] - p[0]):
        rest = []
        for a, b in left:
            lo, hi = max(a, begin), min(b, finish)
            if hi <= lo:
                rest.append((a, b))
                continue
            shares[name] = shares.get(name, 0.0) + (hi - lo) / 1e6
            rest += [(x, y) for x, y in ((a, lo), (hi, b)) if y > x]
        left = rest
    unnamed = sum(b - a for a, b in left) / 1e6
    if unnamed >= GAP_FLOOR_MS:
        shares["(no phase)"] = unnamed
    return sorted(((n, ms) for n, ms in shares.items() if ms >= GAP_FLOOR_MS), key=lambda p: -p[1])


def is_phase(record: dict[str, Any]) -> bool:
    """A ``phase`` record with the fields the anatomy reads, well typed."""
    start, end = record.get("start_ns"), record.get("end_ns")
    return (type(record.get("step")) is int and type(record.get("name")) is str and type(start) is int
            and type(end) is int and end >= start)


def _ms(ms: float) -> float:
    return round(ms, 3)
