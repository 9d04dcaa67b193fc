"""Stand-in for ``torch_npu.npu`` (only ``mstx``)."""

from .mstx import mstx

__all__ = ["mstx"]
