"""The FLOPs of an operator of a Kineto trace, from the input shapes the trace recorded, as torch counts them.

Why here and not from the trace: torch's profiler asked for FLOPs (``with_flops=True``) computes them for
:data:`COUNTED` operators from their inputs, but torch 2.13's Chrome trace does not write the figure (only
``prof.events()`` has it, whose event tree rlprof skips: ``trace_only``); ``with_flops`` makes the profiler
record every op's ``Input Dims`` and ``Concrete Inputs``, and the same formulas are applied to those here.
So a trace's count is what torch's own ``key_averages()`` would report for the same operators.

What is counted (checked against torch 2.13's ``prof.events()`` on CPU: the same figure per op):

* ``aten::mm``, ``aten::addmm``: 2·m·k·n; ``aten::bmm``, ``aten::baddbmm``: 2·b·m·k·n (``addmm``'s and
  ``baddbmm``'s scaled add is not counted, as in torch);
* ``aten::conv2d``: 2·N·H_out·W_out·k_h·k_w·C_in·C_out / groups (stride, padding and dilation from the
  recorded concrete inputs).

What torch counts and rlprof does not: ``aten::add`` and ``aten::mul`` (one FLOP per element of the first
input). MFU's convention, and the peak it is divided by, are the matrix units' work; elementwise FLOPs would
only blur it (a GRU's gates are 2% of its FLOPs, an optimizer's update 100% of its own).

What neither counts, named as **uncounted** compute (:data:`UNCOUNTED`): attention kernels (SDPA's flash,
memory-efficient and cuDNN paths, flash-attn's own ops; SDPA's math path is counted, through its ``bmm``),
other convolutions and every convolution's backward, fused or low-precision matmuls (``_addmm_activation``,
``_scaled_mm``, ``_grouped_mm``), cuDNN/MKL-DNN RNNs. An op of that list is uncounted only when no counted op
ran inside it. A region holding one gets no MFU, and says which (docs/analysis.md, "What the compute
achieves"): its FLOPs are a lower bound, and its MFU would be too low for no fault of the kernels.

A counted op inside another counted op of the same thread is not counted again (the outer one's figure holds it).
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

COUNTED = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::conv2d")
"""The operators whose FLOPs a trace's count holds (torch's formulas, less ``add``/``mul``)."""

UNCOUNTED = ("aten::scaled_dot_product", "aten::_scaled_dot_product", "aten::_flash_attention",
             "aten::_efficient_attention", "aten::_cudnn_attention", "flash_attn", "FlashAttn",
             "aten::conv1d", "aten::conv3d", "aten::conv_transpose", "aten::convolution_backward",
             "aten::_addmm_activation", "aten::_scaled_mm", "aten::_grouped_mm", "aten::cudnn_rnn",
             "aten::_cudnn_rnn", "aten::miopen_rnn", "aten::mkldnn_rnn")
"""Name prefixes of operators that compute and that no formula counts (see the module doc)."""

_MATRIX_INPUTS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}
_CONV_STRIDE, _CONV_PADDING, _CONV_DILATION, _CONV_GROUPS = 3, 4, 5, 6


def is_uncounted(name: str) -> bool:
    return name.startswith(UNCOUNTED)


def op_flops(name: str, args: Any) -> float | None:
    """The FLOPs of one ``cpu_op`` event named ``name`` with ``args`` (its ``Input Dims``, ``Concrete Inputs``);
    None for an op not in :data:`COUNTED` or without the shapes it needs."""
    if name not in COUNTED or not isinstance(args, dict):
        return None
    dims = args.get("Input Dims")
    if not isinstance(dims, list):
        return None
    try:
        if name == "aten::conv2d":
            return _conv2d(dims, args.get("Concrete Inputs"))
        left, right = (dims[i] for i in _MATRIX_INPUTS[name])
        return _matrix_product(left, right, batched=name in ("aten::bmm", "aten::baddbmm"))
    except (IndexError, TypeError, ValueError, ZeroDivisionError):
        return None


def _product(values: Sequence[Any]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _matrix_product(left: Sequence[Any], right: Sequence[Any], batched: bool) -> float | None:
    """2 x every output element x the shared dimension: ``(…, m, k) @ (…, k, n)``."""
    if not left or not right or int(left[-1]) == 0:
        return None
    if batched and (len(left) != 3 or len(right) != 3 or int(left[0]) == 0):
        return None
    if not batched and (len(left) != 2 or len(right) != 2):
        return None
    k = int(left[-1])
    return 2.0 * _product(left) / k * _product(right) / (int(left[0]) if batched else 1)


def _conv2d(dims: list, concrete: Any) -> float | None:
    image, kernel = dims[0], dims[1]
    if len(image) != 4 or len(kernel) != 4 or not isinstance(concrete, list) or len(concrete) <= _CONV_GROUPS:
        return None
    stride, padding, dilation = (_pair(concrete[i]) for i in (_CONV_STRIDE, _CONV_PADDING, _CONV_DILATION))
    groups = int(concrete[_CONV_GROUPS])
    if stride is None or padding is None or dilation is None or groups <= 0 or 0 in stride:
        return None
    n, c_in, h, w = (int(v) for v in image)
    c_out, _, kh, kw = (int(v) for v in kernel)
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return 2.0 * n * oh * ow * kh * kw * c_in * c_out / groups


def _pair(text: Any) -> tuple[int, int] | None:
    """``"[1, 1]"`` (a concrete input as Kineto writes it) -> (1, 1)."""
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else text
    except (ValueError, SyntaxError):
        return None
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    return None
