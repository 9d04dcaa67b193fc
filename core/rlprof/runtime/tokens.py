"""The tokens a region processed, said by the trainer, and the analytic FLOPs they stand for.

Why: a trace counts FLOPs only on profiled steps; the trainer knows every step how many tokens each region
processed (the demo's workers, verl's batch: :mod:`rlprof.integrations.verl.tokens`). ``Profiler.record_tokens``
turns them into one :class:`~rlprof.step_work.Work` on the process's timings: the FLOPs by a named formula of
:mod:`rlprof.model_flops` (worked out once per model and kind, then a multiplication), and the peak of the
model's device (:meth:`rlprof.context.RunInfo.peak`). The step's driver makes tokens per second, model TFLOP/s
and MFU over the window of them (:mod:`rlprof.step_work`).

On the training thread, per call: a dict lookup, a multiplication and a list append; the first call of a
process resolves its device's peak, which may measure it (a fraction of a second, once per run and host). A
role that is not timed costs one attribute check. Never raises into training.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Iterable

from rlprof.layout import safe_name
from rlprof.model_flops import PerToken, per_token
from rlprof.peak import default_dtype, dtype_name

log = logging.getLogger("rlprof")


class TokenCounter:
    """One Profiler's formulas and peaks, each worked out once (see the module doc)."""

    def __init__(self, run: Any):
        self.run = run
        self._formulas: dict[tuple[int, bool], PerToken | None] = {}
        self._peaks: dict[tuple[str, str], dict | None] = {}

    def record(self, times: Any, role: str, stage: str | None, tokens: int, *, model: Any = None, train: bool = False,
               sequences: Iterable[int] = (), flops: float | None = None, formula: str | None = None) -> None:
        """Append the :class:`~rlprof.step_work.Work` of ``tokens`` tokens of ``role``'s region ``stage`` to
        ``times`` (the Profiler's :class:`~rlprof.runtime.step_timings.RegionTimes`)."""
        try:
            if flops is None:
                found = self._per_token(model, train)
                if found is None:
                    return
                flops, formula = found.flops(int(tokens), sequences), found.formula
            region = safe_name(f"{role}_{stage}" if stage else role)
            times.work.append((role, region, time.time_ns(), int(tokens), float(flops), formula or "given",
                               self._peak(model)))
        except Exception as exc:  # the figures of one region are never worth a failed step
            from rlprof.notices import say_once

            say_once(f"record_tokens: {type(exc).__name__}", log, "rlprof: the tokens of %s are left out of the step "
                     "metrics (%s: %s)", role, type(exc).__name__, exc)

    def _per_token(self, model: Any, train: bool) -> PerToken | None:
        key = (id(model), train)
        if key not in self._formulas:
            self._formulas[key] = per_token(model, train=train) if model is not None else None
            if self._formulas[key] is None:
                from rlprof.notices import say_once

                say_once("record_tokens: no formula", log, "rlprof: record_tokens was given tokens but no model rlprof "
                         "can count FLOPs of (%s); pass model= or flops=", type(model).__name__)
        return self._formulas[key]

    def _peak(self, model: Any) -> dict | None:
        device, dtype = device_of(model)
        key = (device, dtype)
        if key not in self._peaks:
            self._peaks[key] = self.run.peak(device, dtype).as_dict()
        return self._peaks[key]


def device_of(model: Any) -> tuple[str, str]:
    """The device ``model``'s parameters are on and the dtype its products run in: the parameters' own on a CPU,
    and on an accelerator half precision (bf16 unless the parameters are fp16: mixed precision keeps fp32
    weights and multiplies in bf16). No model: the current CUDA device where torch has one, else the CPU."""
    parameter = None
    try:
        parameter = next(iter(model.parameters())) if model is not None else None
    except (AttributeError, StopIteration, TypeError):
        parameter = None
    if parameter is not None:
        device = str(parameter.device)
        device = device if ":" in device or device == "cpu" else f"{device}:0"
        dtype = dtype_name(parameter.dtype)
        if device != "cpu":
            dtype = "fp16" if dtype == "fp16" else "bf16"
        return device, dtype
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return f"cuda:{torch.cuda.current_device()}", "bf16"
    except Exception:
        pass
    return "cpu", default_dtype("cpu")
