"""A byte count in words (``1.5 MiB``): the one rule every table and line of rlprof writes sizes with."""

from __future__ import annotations


def size_text(n: float) -> str:
    """``n`` bytes as ``512 B``, ``1.5 KiB``, ``3.0 MiB``, ``2.1 GiB`` (binary units, GiB the largest)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
