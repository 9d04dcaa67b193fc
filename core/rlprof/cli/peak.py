"""``rlprof peak [--device D] [--dtype D] [--seconds S] [--json]``: the peak FLOP/s a plain matmul reaches here.

Use it to see what MFU is divided by on a machine before a run, or to set ``global_profiler.peak_tflops``: it
runs the same short calibration a run measures once per run and host (:func:`rlprof.peak.calibrate`: square
products of the dtype, the best round) and prints the device, the dtype and the TFLOP/s, with the device's
spec from rlprof's table where it has one. Needs torch (and the device's own torch build).

Exit status: 0 measured; 1 the device or dtype cannot be measured here; 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rlprof.peak import CALIBRATION_S, DTYPES, calibrate, default_dtype, device_name, spec_tflops


def default_device() -> str:
    """The first accelerator torch sees (CUDA, then Ascend), else the CPU."""
    import torch

    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.current_device()}"
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():  # type: ignore[attr-defined]
            return "npu:0"
    except Exception:
        pass
    return "cpu"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof peak", description="The peak FLOP/s a plain matmul reaches on this "
                                     "device and dtype (what a run's MFU is divided by where the spec is unknown).")
    parser.add_argument("--device", default=None, help="cpu, cuda:0, npu:0 (default: the first accelerator, else cpu)")
    parser.add_argument("--dtype", default=None, choices=[d for d in DTYPES if d != "fp8"],
                        help="default: fp32 on a CPU, bf16 on an accelerator")
    parser.add_argument("--seconds", type=float, default=CALIBRATION_S,
                        help=f"how long the timed rounds run (default {CALIBRATION_S:g})")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if not opts.seconds > 0:
        parser.error(f"--seconds: got {opts.seconds:g}; allowed: a number of seconds > 0")
    try:
        device = opts.device or default_device()
        dtype = opts.dtype or default_dtype(device)
        tflops = calibrate(device, dtype, opts.seconds)
    except Exception as exc:  # no such device, a dtype it cannot multiply, no torch
        print(f"rlprof peak: cannot measure {opts.device or 'this device'} {opts.dtype or ''}: "
              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return 1
    name = device_name(device)
    spec = spec_tflops(name, dtype)
    if opts.json:
        print(json.dumps({"device": name, "where": device, "dtype": dtype, "tflops": tflops, "spec_tflops": spec,
                          "seconds": opts.seconds}))
    else:
        beside = f" (spec {spec:g} TFLOP/s: {100 * tflops / spec:.0f}% of it)" if spec else " (no spec in rlprof's table)"
        print(f"device {name} ({device}), dtype {dtype}: {tflops:.4g} TFLOP/s{beside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
