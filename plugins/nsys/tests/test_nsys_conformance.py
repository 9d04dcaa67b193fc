"""The nsys backend keeps the contract every rlprof backend is held to (rlprof.testing.conformance),
here with verl's worker options set, through its entry point as the core loads it."""

from __future__ import annotations

from rlprof.testing.conformance import BackendConformance


class TestNsysConformance(BackendConformance):
    backend = "nsys"
    tool_config = {
        "worker_nsight_options": {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true",
                                  "capture-range": "cudaProfilerApi", "capture-range-end": None, "kill": "none"},
        "controller_nsight_options": {"trace": "cuda,nvtx"},
    }
