"""Reading msprobe dumps: where their ``dump.json`` files are, the tensors each lists, and their size.

A region's dump directory (the ``msprobe_dump`` artifact) holds what msprobe wrote for it:
``step<n>/rank<r>/dump.json`` (``proc<pid>`` without torch.distributed), beside ``stack.json`` and
``construct.json``; with the ``tensor`` task also the tensors themselves. ``dump.json`` maps each call
msprobe saw (``Module.<name>.<Class>.forward.<n>`` at level L0, ``Functional.linear.0.forward`` at L1)
to its inputs, outputs and parameters, each tensor described by dtype, shape and statistics
(Max/Min/Mean/Norm). :func:`details` is what ``rlprof report`` shows per dump.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

DTYPE_BYTES = {
    "torch.float64": 8, "torch.float32": 4, "torch.float16": 2, "torch.bfloat16": 2, "torch.complex64": 8,
    "torch.complex128": 16, "torch.int64": 8, "torch.int32": 4, "torch.int16": 2, "torch.int8": 1,
    "torch.uint8": 1, "torch.bool": 1, "torch.float8_e4m3fn": 1, "torch.float8_e5m2": 1,
}
"""Bytes per element of the dtypes msprobe names (a tensor of another dtype counts as unknown size)."""


@dataclass(frozen=True)
class Tensor:
    """One tensor a dump describes: where it sits in its call (``input.0``, ``output.0``, ``parameters.weight``)."""

    call: str
    """The call it belongs to, e.g. ``Module.head.Linear.forward.0``."""
    slot: str
    stats: dict[str, Any]

    @property
    def nbytes(self) -> int | None:
        per = DTYPE_BYTES.get(self.stats.get("dtype"))
        shape = self.stats.get("shape")
        if per is None or not isinstance(shape, list):
            return None
        count = 1
        for dim in shape:
            count *= int(dim)
        return count * per


@dataclass(frozen=True)
class Dump:
    """One ``dump.json``: its task and level, and its calls in the order msprobe saw them."""

    path: Path
    task: str
    level: str
    calls: dict[str, Any]

    def tensors(self) -> Iterator[Tensor]:
        """Every tensor of every call, in call order."""
        for call, entry in self.calls.items():
            if isinstance(entry, dict):
                for slot, stats in _tensors(entry, ""):
                    yield Tensor(call, slot, stats)


def dump_files(path: Path | str) -> list[Path]:
    """The ``dump.json`` files of a dump directory (or ``path`` itself when it is one), in path order."""
    path = Path(path)
    if path.is_file():
        return [path] if path.name == "dump.json" else []
    return sorted(path.rglob("dump.json")) if path.is_dir() else []


def read_dump(path: Path) -> Dump:
    """One ``dump.json``. Raises ``OSError``/``ValueError`` for a file that cannot be read as one."""
    with open(path, encoding="utf-8") as f:
        loaded = json.load(f)
    if not isinstance(loaded, dict) or not isinstance(loaded.get("data"), dict):
        raise ValueError(f"{path} is not an msprobe dump.json (no 'data' mapping)")
    return Dump(Path(path), str(loaded.get("task")), str(loaded.get("level")), loaded["data"])


def details(path: Path | str) -> list[str]:
    """What ``rlprof report`` says about one dump artifact: per ``dump.json``, how many tensors were
    dumped and their total size, over how many calls, with msprobe's task and level."""
    files = dump_files(path)
    if not files:
        return [f"{path}: no dump.json (msprobe wrote nothing here)"]
    lines = []
    root = Path(path) if Path(path).is_dir() else Path(path).parent
    for file in files:
        where = file.parent.relative_to(root) if file.parent != root else Path(".")
        try:
            dump = read_dump(file)
        except (OSError, ValueError) as exc:
            lines.append(f"{where}: unreadable dump.json: {type(exc).__name__}: {exc}")
            continue
        tensors = list(dump.tensors())
        sizes = [t.nbytes for t in tensors]
        known = sum(s for s in sizes if s is not None)
        unknown = sum(1 for s in sizes if s is None)
        size = _tensor_bytes(known) + (f" (+{unknown} of unknown dtype)" if unknown else "")
        lines.append(f"{where}: {len(tensors)} tensors dumped, {size} of tensor data, {len(dump.calls)} calls "
                     f"(msprobe task {dump.task}, level {dump.level})")
    return lines


def _tensor_bytes(n: float) -> str:
    """msprobe's own words for a size (KB, MB: the units its summaries use)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def _tensors(node: Any, slot: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(slot, stats)`` of every tensor under ``node``: a dict with ``type: torch.Tensor`` is one;
    lists and other dicts are walked (``input_args`` -> ``input.0``, ``parameters`` -> ``parameters.weight``)."""
    if isinstance(node, dict):
        if node.get("type") == "torch.Tensor":
            yield slot, node
            return
        for key, value in node.items():
            name = {"input_args": "input", "input_kwargs": "input"}.get(key, key)
            yield from _tensors(value, f"{slot}.{name}" if slot else name)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _tensors(value, f"{slot}.{i}" if slot else str(i))
