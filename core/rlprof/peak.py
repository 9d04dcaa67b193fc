"""A device's peak FLOP/s: the spec table, a configured figure, a short matmul calibration, and which one is used.

Why: MFU is achieved FLOP/s over a peak, and a wrong peak is the commonest wrong MFU (verl divides by
infinity on a device its table lacks, so MFU 0; a peak set too low gives figures above 100%). So a peak
here always says where it came from (:attr:`Peak.source`) and its dtype, and the run keeps a measured
figure beside it: what a plain matrix product of that dtype reaches on that device (:func:`calibrate`).

Which peak a figure is divided by (:func:`resolve`, the one rule):

1. ``global_profiler.peak_tflops``, where the user configured one and the device did not demonstrably
   beat it: a configured peak below what the calibration measured (by more than :data:`BEATEN`) cannot
   be the device's peak, so it is **refused** with the reason (:attr:`Peak.refused`) and the next one used;
2. the spec of the device from :data:`SPECS` (dense, no sparsity), keyed by a name the device reports
   (``torch.cuda.get_device_name()``: ``NVIDIA H100 80GB HBM3``) and the dtype;
3. the measured one.

MFU against the measured peak is shown beside MFU against the one used (:attr:`Peak.measured_tflops`).

A leaf: nothing here imports torch until :func:`calibrate` runs.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

DTYPES = ("bf16", "fp16", "fp32", "tf32", "fp8")
"""The dtypes a peak is given for (``tf32``: fp32 tensors multiplied on tensor cores)."""

SPEC, CONFIGURED, MEASURED = "spec", "configured", "measured"
"""Where a peak came from (:attr:`Peak.source`)."""

BEATEN = 1.10
"""A configured peak is refused when the calibration measured more than this times it: a plain matmul
loop cannot pass a device's true peak, so the configured figure is too low (noise stays well under 10%)."""

SPECS: tuple[tuple[str, Mapping[str, float]], ...] = (
    # (a pattern of the name the device reports, dense TFLOP/s per dtype from the vendor's datasheet);
    # the first pattern found in the name wins, so a variant comes before its family
    (r"H100.*PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2, "fp8": 1513.0}),
    (r"H100|H200|H800", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9, "fp8": 1978.9}),
    (r"H20\b", {"bf16": 148.0, "fp16": 148.0, "tf32": 74.0, "fp32": 44.0, "fp8": 296.0}),
    (r"B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp8": 4500.0}),
    (r"A100|A800", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    (r"L40S", {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6, "fp8": 733.0}),
    (r"L40\b", {"bf16": 181.05, "fp16": 181.05, "tf32": 90.5, "fp32": 90.5}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3, "fp8": 242.0}),
    (r"\bA40\b", {"bf16": 149.7, "fp16": 149.7, "tf32": 74.8, "fp32": 37.4}),
    (r"\bA10\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    (r"V100", {"fp16": 125.0, "fp32": 15.7}),
    (r"MI300X", {"bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7, "fp32": 163.4, "fp8": 2614.9}),
    (r"MI250X", {"bf16": 383.0, "fp16": 383.0, "fp32": 95.7}),
)
"""Spec peaks, dense (no 2:4 sparsity), by device name. A CPU has none: its peak is measured."""


def default_dtype(device: str) -> str:
    """The dtype a device's figures are told in when nothing says otherwise: ``fp32`` on a CPU, ``bf16`` on an
    accelerator (mixed-precision training's matmuls)."""
    return "fp32" if device.split(":")[0] == "cpu" else "bf16"


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16``, ``"bfloat16"``, ``"bf16"`` -> ``bf16`` (one of :data:`DTYPES`; unknown: as given)."""
    text = str(dtype).removeprefix("torch.").lower()
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
            "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(text, text)


def spec_tflops(device_name: str, dtype: str) -> float | None:
    """The spec peak of the device named ``device_name`` for ``dtype``, or None when :data:`SPECS` has none."""
    for pattern, peaks in SPECS:
        if re.search(pattern, device_name or ""):
            return peaks.get(dtype)
    return None


@dataclass(frozen=True)
class Peak:
    """The peak a process's figures are divided by, and where it came from."""

    tflops: float | None
    """TFLOP/s; None when none is known (then no MFU is given)."""
    source: str
    """:data:`CONFIGURED`, :data:`SPEC` or :data:`MEASURED`; ``unknown`` with no figure."""
    device: str
    """The device's name as it reports it (``NVIDIA H100 80GB HBM3``; a CPU's model name)."""
    dtype: str
    measured_tflops: float | None = None
    """What the calibration reached on this device and dtype (None: not measured)."""
    refused: str | None = None
    """Why a configured peak was not used (None: none was refused)."""

    @property
    def said(self) -> str:
        """``spec 989.4 TFLOP/s (NVIDIA H100 80GB HBM3, bf16)``: the peak as the report names it."""
        if self.tflops is None:
            return f"unknown ({self.device}, {self.dtype})"
        return f"{self.source} {self.tflops:.4g} TFLOP/s ({self.device}, {self.dtype})"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> "Peak | None":
        """A peak from its :meth:`as_dict` (None for none or a malformed one)."""
        if not isinstance(raw, Mapping):
            return None
        try:
            return cls(**{k: raw.get(k) for k in ("tflops", "source", "device", "dtype", "measured_tflops", "refused")})
        except TypeError:
            return None


def resolve(device: str, dtype: str, configured: float | None = None, measured: float | None = None) -> Peak:
    """The peak to divide by (the rule in the module doc)."""
    spec = spec_tflops(device, dtype)
    refused = None
    if configured is not None:
        if measured is not None and measured > configured * BEATEN:
            refused = (f"global_profiler.peak_tflops={configured:g} is refused: this device ({device}, {dtype}) "
                       f"measured {measured:.4g} TFLOP/s in a plain matmul loop, more than its peak can be "
                       f"(MFU against it would pass 100%)")
        else:
            return Peak(configured, CONFIGURED, device, dtype, measured)
    if spec is not None:
        return Peak(spec, SPEC, device, dtype, measured, refused)
    if measured is not None:
        return Peak(measured, MEASURED, device, dtype, measured, refused)
    return Peak(None, "unknown", device, dtype, None, refused)


# ------------------------------------------------------------------------------------------ calibration


CALIBRATION_S = 0.2
"""How long :func:`calibrate` runs by default (its rounds, after a warm-up)."""
SIZES = {"cpu": 1024, "cuda": 4096, "npu": 4096}
"""The side of the square matrices multiplied, per device type: large enough that one product is mostly
arithmetic (on this 2-core VM fp32 products of 512 and 1024 reach the same rate when it is quiet; beside busy
processes 512 reached a quarter of 1024's: each product's threads wait for a core more often), small enough for
a quick round (1024 fp32: about 10 ms here)."""


def device_name(device: str) -> str:
    """The name ``device`` (``cpu``, ``cuda:0``, ``npu:0``) reports: what :data:`SPECS` is keyed by."""
    kind = device.split(":")[0]
    try:
        if kind == "cuda":
            import torch

            return torch.cuda.get_device_name(device)
        if kind == "npu":
            import torch_npu  # noqa: F401  (registers torch.npu)
            import torch

            return torch.npu.get_device_name(device)  # type: ignore[attr-defined]
    except Exception:
        return kind
    return _cpu_name()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "cpu"


def calibrate(device: str = "cpu", dtype: str = "fp32", seconds: float = CALIBRATION_S) -> float:
    """TFLOP/s a plain matrix product of ``dtype`` reaches on ``device``: the best of several timed rounds
    of square products (:data:`SIZES`) after a warm-up, each round ended by a device synchronisation.
    The best round, not the mean: a peak is what the device can do, and a busy neighbour only slows rounds."""
    import torch

    kind = device.split(":")[0]
    n = SIZES.get(kind, SIZES["cuda"])
    tensor_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "tf32": torch.float32}.get(dtype)
    if tensor_dtype is None:
        raise ValueError(f"dtype {dtype!r} is not calibrated here; allowed: bf16, fp16, fp32, tf32")
    sync = getattr(getattr(torch, kind, None), "synchronize", None) if kind != "cpu" else None
    a = torch.randn(n, n, device=device).to(tensor_dtype)
    b = torch.randn(n, n, device=device).to(tensor_dtype)
    precision = torch.get_float32_matmul_precision()
    if dtype == "tf32":
        torch.set_float32_matmul_precision("high")
    try:
        flops = 2.0 * n ** 3
        torch.mm(a, b)  # the first product sets up what later ones reuse: not timed
        began = time.perf_counter()
        torch.mm(a, b)
        if sync:
            sync()
        first = max(time.perf_counter() - began, 1e-6)
        per_round = max(1, int(seconds / 8 / first))
        best, deadline = 0.0, time.perf_counter() + seconds
        while True:
            start = time.perf_counter()
            for _ in range(per_round):
                torch.mm(a, b)
            if sync:
                sync()
            elapsed = time.perf_counter() - start
            best = max(best, flops * per_round / max(elapsed, 1e-9))
            if time.perf_counter() >= deadline:
                break
    finally:
        torch.set_float32_matmul_precision(precision)
    return best / 1e12


# ------------------------------------------------------------------------------------------ once per run


_resolved: dict[tuple[str, str, str, str, float | None], Peak] = {}
"""(run dir, host, device, dtype, configured) -> the peak, once per process."""
_measured: dict[tuple[str, str, str], float] = {}
"""(host, device, dtype) -> what this process measured: a later run of the same process (a test session, a
sweep) records it in its own run rather than measuring again."""


def run_peak(run_dir: Any, host: str, device: str, dtype: str | None = None, configured: float | None = None,
             measure: bool = True) -> Peak:
    """The peak this process's figures on ``device`` are divided by (:func:`resolve`), with the calibration
    measured **once per run and host**: the first process of the host to ask measures under a lock on
    ``<run>/peak/<host>-<device>-<dtype>.json`` and writes it there; every later one (and every later call of
    this process) reads it. ``measure=False``: only a figure already measured is used. Never raises: a
    calibration that fails leaves ``measured_tflops`` None (said in :attr:`Peak.refused` only when a
    configured peak needed it)."""
    import fcntl
    import json
    from pathlib import Path

    from rlprof.layout import PEAK_DIR, ensure_dir, open_file, safe_name

    dtype = dtype or default_dtype(device)
    key = (str(run_dir), host, device, dtype, configured)
    if key in _resolved:
        return _resolved[key]
    name = device_name(device)
    root = Path(run_dir)
    measured = None
    try:
        folder = ensure_dir(root / PEAK_DIR, root)
        path = folder / f"{safe_name(host)}-{safe_name(name)}-{dtype}.json"
        with open_file(folder / f".{path.name}.lock", root, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                measured = float(json.loads(path.read_text())["tflops"])
            except (OSError, ValueError, KeyError, TypeError):
                if measure:
                    began = time.perf_counter()
                    measured = _measured.get((host, device, dtype)) or calibrate(device, dtype)
                    _measured[(host, device, dtype)] = measured
                    with open_file(path, root, "w") as out:
                        out.write(json.dumps({"device": name, "dtype": dtype, "tflops": measured, "host": host,
                                              "seconds": round(time.perf_counter() - began, 3)}) + "\n")
    except Exception:  # no peak is never a failure of the run: the figures say the peak is unknown
        measured = None
    peak = _resolved[key] = resolve(name, dtype, configured, measured)
    if peak.refused:
        import logging

        from rlprof.notices import say_once

        say_once(f"peak refused: {peak.refused}", logging.getLogger("rlprof"), "rlprof: %s; MFU is divided by the %s "
                 "peak instead (%s)", peak.refused, peak.source, peak.said)
    return peak


def recorded_peak(trace_path: Any, accelerator: bool = True) -> Peak | None:
    """The peak of a trace whose capture wrote none itself (torch_npu's trace view): the calibration its host recorded
    in the trace's run (``<run>/peak/<host>-...json``, an accelerator's, or the CPU's), resolved against the spec
    table; a configured ``peak_tflops`` is not known here. None when the run recorded none."""
    import json
    from pathlib import Path

    from rlprof.layout import MANIFEST_DIR, PEAK_DIR, host_of, safe_name

    path = Path(trace_path).resolve()
    run_dir = next((p for p in path.parents if (p / MANIFEST_DIR).is_dir() and (p / PEAK_DIR).is_dir()), None)
    host = host_of(path)
    if run_dir is None or host is None:
        return None
    for found in sorted((run_dir / PEAK_DIR).glob(f"{safe_name(host)}-*.json")):
        try:
            raw = json.loads(found.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(raw, dict) and (raw.get("dtype") != "fp32") == accelerator:
            return resolve(str(raw.get("device")), str(raw.get("dtype")), None, raw.get("tflops"))
    return None
