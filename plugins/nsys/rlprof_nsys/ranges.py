"""NVTX ranges in the ``rlprof`` domain: one per profiled step and one per role region.

They are what a user reads in the Nsight Systems timeline ("where did step 3 spend its time, which
part was ``actor_update``"), so they must be named exactly as the core names them, coloured the same
way in every report, and nested the way the hooks are called: ``step3`` around ``ref_compute_log_prob``
and ``actor_update``.

Why process ranges (``nvtxDomainRangeStartEx``/``End``) rather than push/pop: push/pop ranges belong
to the calling thread, and a Ray worker may run ``start_step`` and a role region on different
threads (threaded or async actors); a pop on the wrong thread corrupts both threads' stacks.
Process ranges are closed by id from any thread. The nesting is kept here instead: this class holds
the open ranges as a stack and always ends them innermost first, so a region left open by an
exception or a missed hook still closes before its step does.

Without an NVTX tool attached (no nsys, no injection library), the ``nvtx`` package hands out a
dummy domain and every call below costs a method call. Without the ``nvtx`` package at all, ranges
are skipped with one warning.
"""

from __future__ import annotations

import logging
import threading
import zlib
from typing import Any

log = logging.getLogger("rlprof")

DOMAIN = "rlprof"
"""The NVTX domain of every range and mark this backend emits (a row of its own in Nsight Systems)."""

ROLE_COLORS = {
    "actor": 0xFF76B900,
    "rollout": 0xFF1F77B4,
    "ref": 0xFFFF7F0E,
    "critic": 0xFF9467BD,
    "reward": 0xFFD62728,
}
"""ARGB colour per role, the same in every report and every run."""
STEP_COLOR = 0xFF7F7F7F
MARK_COLOR = 0xFF17BECF


def role_color(role: str) -> int:
    """The colour of ``role``'s ranges: a fixed one for verl's roles, else one derived from the name
    (crc32, so a custom role keeps its colour across processes, unlike ``hash()``)."""
    return ROLE_COLORS.get(role) or (0xFF000000 | (zlib.crc32(role.encode()) & 0xFFFFFF))


class RangeStack:
    """The open NVTX ranges of one backend instance, innermost last."""

    def __init__(self) -> None:
        self._domain: Any = None
        self._open: list[tuple[str, str, int]] = []
        """(kind, name, range id) per open range; kind is ``step`` or ``region``."""
        self._lock = threading.Lock()

    def _nvtx(self) -> Any:
        """The ``rlprof`` domain, created on first use: NVTX loads its tool (nsys' injection library)
        at that moment, so importing this module never does."""
        if self._domain is None:
            try:
                import nvtx
            except ImportError as exc:
                log.warning("rlprof nsys: the nvtx package cannot be imported (%s); no NVTX ranges will be emitted", exc)
                self._domain = False
            else:
                self._domain = nvtx.get_domain(DOMAIN)
        return self._domain

    def open(self, kind: str, name: str, color: int, category: str) -> None:
        """Start a range ``name`` nested in whatever is open."""
        domain = self._nvtx()
        range_id = domain.start_range(message=name, color=color, category=category) if domain else 0
        with self._lock:
            self._open.append((kind, name, range_id))

    def close(self, kind: str, name: str) -> None:
        """End the innermost open range ``name`` of ``kind``, first ending (with a warning) any range
        still open inside it. A range that is not open is a warning, not an error."""
        with self._lock:
            for index in range(len(self._open) - 1, -1, -1):
                if self._open[index][:2] == (kind, name):
                    closing = self._open[index:]
                    del self._open[index:]
                    break
            else:
                log.warning("rlprof nsys: no open NVTX range %r to close", name)
                return
        for _, inner, _ in closing[:0:-1]:
            log.warning("rlprof nsys: NVTX range %r was still open when %r ended; closing it first", inner, name)
        for _, _, range_id in reversed(closing):
            self._end(range_id)

    def close_all(self) -> None:
        """End every open range, innermost first (finalize: the process is ending)."""
        with self._lock:
            closing, self._open = self._open, []
        for _, _, range_id in reversed(closing):
            self._end(range_id)

    def mark(self, message: str, payload: int | None = None) -> None:
        """An instant event in the ``rlprof`` domain (capture boundaries, sampled iterations).

        Varying numbers go in ``payload``, not in the message: nvtx registers (and caches) every
        distinct message, so ``"actor_update iteration"`` + payload 417 stays one string."""
        domain = self._nvtx()
        if domain:
            domain.mark(message=message, color=MARK_COLOR, payload=payload)

    @property
    def names(self) -> list[str]:
        """Names of the open ranges, outermost first (for tests and error messages)."""
        with self._lock:
            return [name for _, name, _ in self._open]

    def _end(self, range_id: int) -> None:
        domain = self._nvtx()
        if domain:
            domain.end_range(range_id)
