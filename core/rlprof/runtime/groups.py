"""Step grouping: which close of a capture ends a group of captures, for backends that write one
output for several training steps (``torch_memory``'s ``memory_snapshot_num_steps``).

That is step policy, so the core decides it, once for every backend: a backend whose validated
tool_config carries :data:`GROUP_KEY` ``N`` has its closed captures grouped until they cover ``N``
step numbers; the close that completes a group is told so with ``ctx.ends_group`` (the group's step
numbers), and ``finalize`` ends the group left over. Without the key every close ends its own group.
The backend keeps what it collects until it is told to write it.
"""

from __future__ import annotations

from typing import Any, Mapping

GROUP_KEY = "memory_snapshot_num_steps"
"""The tool_config key the core reads from a backend's *validated* config (verl's name for it): a
positive int, the number of step numbers one group of captures covers. Any backend may return it."""


class StepGroups:
    """The groups in progress of one process session's backends (the registry asks it on every
    closing call and at finalize)."""

    def __init__(self) -> None:
        self._pending: dict[str, list[int]] = {}
        """Backend -> step numbers its captures closed since its last group ended, in order."""

    def close(self, backend: str, tool_config: Mapping[str, Any], capture: Any) -> tuple[int, ...]:
        """``backend`` closes ``capture`` now: the step numbers of the group this close completes, or
        ``()`` while the group needs more steps."""
        if capture is None:
            return ()
        size = tool_config.get(GROUP_KEY, 1)
        pending = self._pending.setdefault(backend, [])
        pending.extend(step for step in capture.steps if step not in pending)
        if isinstance(size, int) and len(pending) < size:
            return ()
        del self._pending[backend]
        return tuple(pending)

    def finish(self, backend: str, tool_config: Mapping[str, Any], capture: Any) -> tuple[int, ...]:
        """``backend`` finalizes: the step numbers of its group left over (captures closed since its last
        group ended, fewer than the group's size), or ``()``."""
        return tuple(self._pending.pop(backend, ()))
