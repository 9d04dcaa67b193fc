"""NVTX ranges in the ``rlprof`` domain: one per profiled step and one per role region.

They are what a user reads in the Nsight Systems timeline ("where did step 3 spend its time, which
part was ``actor_update``"), so they must be named exactly as the core names them, coloured the same
way in every report, and nested the way the hooks are called: ``step3`` around ``ref_compute_log_prob``
and ``actor_update``.

Why process ranges (``nvtxDomainRangeStartEx``/``End``) rather than push/pop: push/pop ranges belong
to the calling thread, and a Ray worker may run ``start_step`` and a role region on different
threads (threaded or async actors); a pop on the wrong thread corrupts both threads' stacks.
Process ranges are closed by id from any thread. The nesting is kept here instead, as a plain stack
of open range ids: the core's capture machine sends the closing calls last-in-first-out (a region
that raised, or a step ending with regions open, still has them exited innermost first), so each
close ends the innermost open range.

The calls go straight to the NVTX tool through :mod:`rlprof_nsys.nvtx_client` (plain NVTX v3
domain ranges with ASCII messages, the form every Nsight Systems from 2022.4 on records; the ``nvtx``
package's ranges are invisible to the older ones). Without a tool attached (no nsys, no injection
library) every call below is one attribute check.
"""

from __future__ import annotations

import threading
import zlib
from typing import Any

from . import nvtx_client

DOMAIN = "rlprof"
"""The NVTX domain of every range and mark this backend emits (a row of its own in Nsight Systems)."""
WINDOW_RANGE = "rlprof_capture"
"""The NVTX range around each capture window when ``capture_range: nvtx`` (a registered string: nsys'
``--nvtx-capture`` matches only those by default)."""
NVTX_CAPTURE = f"{WINDOW_RANGE}@{DOMAIN}"
"""The ``--nvtx-capture`` value that makes each window range one nsys capture."""
WINDOW_COLOR = 0xFF000000

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
        self._tool: Any = None
        self._domain: int | None = None
        self._categories: dict[str, int] = {}
        self._messages: dict[str, bytes] = {}
        self._window_name: int | None = None
        self._open: list[int] = []
        """Ids of the open step and region ranges, innermost last."""
        self._lock = threading.Lock()
        """Hooks of one process may come from different threads (threaded or async Ray actors)."""

    def _nvtx(self) -> Any:
        """The process's NVTX tool, with the ``rlprof`` domain created on first use: NVTX loads its
        tool (nsys' injection library) at that moment, so importing this module never does."""
        if self._tool is None:
            tool = nvtx_client.tool()
            self._domain = tool.domain(DOMAIN)
            self._tool = tool
        return self._tool

    def _message(self, text: str) -> bytes:
        message = self._messages.get(text)
        if message is None:
            message = self._messages[text] = nvtx_client.ascii_text(text)
        return message

    def _category(self, tool: Any, name: str) -> int:
        """The category id of ``name`` (a role) in the ``rlprof`` domain, named at first use."""
        category = self._categories.get(name)
        if category is None:
            category = self._categories[name] = len(self._categories) + 1
            tool.name_category(self._domain, category, name)
        return category

    def open(self, name: str, color: int, category: str) -> None:
        """Start a range ``name`` nested in whatever is open."""
        tool = self._nvtx()
        range_id = tool.range_start(self._domain, self._message(name), color, self._category(tool, category)) if tool.attached else 0
        with self._lock:
            self._open.append(range_id)

    def close(self) -> None:
        """End the innermost open range: the one whose region or step is ending. Nothing is open only
        when our own hook raised before its range began (the core still sends the closing call)."""
        with self._lock:
            if not self._open:
                return
            range_id = self._open.pop()
        self._end(range_id)

    def close_all(self) -> None:
        """End every open range, innermost first (finalize: the process is ending)."""
        with self._lock:
            closing, self._open = self._open, []
        for range_id in reversed(closing):
            self._end(range_id)

    def mark(self, message: str, payload: int | None = None) -> None:
        """An instant event in the ``rlprof`` domain (capture boundaries, sampled iterations).

        Varying numbers go in ``payload``, not in the message, so ``"actor_update iteration"`` stays
        one string in the report whatever the iteration."""
        tool = self._nvtx()
        tool.mark(self._domain, self._message(message), MARK_COLOR, payload)

    def window_start(self) -> int:
        """Start the ``rlprof_capture`` range of a capture window (outside the step/region stack: it
        opens before and ends after them); its id, 0 without a tool."""
        tool = self._nvtx()
        if not tool.attached:
            return 0
        if self._window_name is None:
            self._window_name = tool.register(self._domain, WINDOW_RANGE) or 0
        return tool.range_start(self._domain, self._message(WINDOW_RANGE), WINDOW_COLOR, 0, registered=self._window_name)

    def window_end(self, range_id: int) -> None:
        """End a range started by :meth:`window_start`."""
        self._end(range_id)

    @property
    def attached(self) -> bool:
        """Whether an NVTX tool records these ranges."""
        return self._nvtx().attached

    def _end(self, range_id: int) -> None:
        self._nvtx().range_end(self._domain, range_id)
