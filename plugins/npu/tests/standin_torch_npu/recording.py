"""What the stand-in was asked to do: one ordered log of calls (stand-in only, not mirrored)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    name: str
    """``profile``, ``profile.start``, ``profile.stop``, ``_ExperimentalConfig``,
    ``tensorboard_trace_handler``, ``mstx.range_start``, ``mstx.range_end``, ``analyse``."""
    args: dict[str, Any] = field(default_factory=dict)


class CallLog:
    def __init__(self) -> None:
        self.calls: list[Call] = []

    def record(self, name: str, **args: Any) -> None:
        self.calls.append(Call(name, args))

    def named(self, *names: str) -> list[Call]:
        return [c for c in self.calls if c.name in names]

    def reset(self) -> None:
        self.calls.clear()


LOG = CallLog()
