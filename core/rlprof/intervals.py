"""Time as sets of intervals: the one union of intervals every figure of the breakdown, the anatomy and the step metrics is made of.

A *union* is a sorted list of disjoint, non-empty ``(start, end)`` pairs. Time that two events
share is counted once, which is why the breakdown measures unions and never adds durations: two
kernels on two streams for the same 3 ms cover 3 ms of wall time, not 6 (docs/analysis.md,
"Inside a region"). A leaf, so the step metrics of a running job and the analysis after it count covered
time with the same functions.
"""

from __future__ import annotations

from typing import Iterable

Union = list[tuple[float, float]]


def union(intervals: Iterable[tuple[float, float]]) -> Union:
    """The union of ``intervals`` as sorted disjoint pairs; empty and reversed intervals are dropped."""
    merged: Union = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def length(intervals: Union) -> float:
    """The time a union covers."""
    return sum(end - start for start, end in intervals)


def intersection(a: Union, b: Union) -> Union:
    """The time two unions share, as a union (one sweep over both)."""
    shared: Union = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            shared.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return shared


def difference(a: Union, b: Union) -> Union:
    """The time ``a`` covers and ``b`` does not, as a union."""
    left: Union = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                left.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            left.append((cursor, end))
    return left


def clip(intervals: Union, start: float, end: float) -> Union:
    """The part of a union inside ``[start, end]``."""
    return intersection(intervals, [(start, end)] if end > start else [])
