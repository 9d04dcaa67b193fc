"""How a figure of the breakdown reads in a table, by its unit: bytes in binary units, FLOPs in SI units,
FLOP/s likewise, fractions (MFU) as a percentage. Times (ms) are each table's own business."""

from __future__ import annotations


def flops_text(n: float) -> str:
    """``2.56 MFLOP``."""
    for unit in ("", "K", "M", "G", "T", "P"):
        if abs(n) < 1000 or unit == "P":
            return f"{n:.3g} {unit}FLOP"
        n /= 1000
    return f"{n} FLOP"


def bytes_text(n: float) -> str:
    """``1.5 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


UNIT_TEXT = {"bytes": bytes_text, "flop": flops_text, "flop/s": lambda v: flops_text(v) + "/s",
             "frac": lambda v: f"{100 * v:.1f}%"}
"""Unit -> how a value of it reads."""
