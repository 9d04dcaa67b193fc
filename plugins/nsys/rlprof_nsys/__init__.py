"""rlprof-nsys: the ``nsys`` backend of rlprof (NVIDIA Nsight Systems).

Select it with ``global_profiler.tool: nsys``. In every profiled process it marks each step and role
region as an NVTX range in the ``rlprof`` domain (straight to the NVTX tool, see
:mod:`rlprof_nsys.nvtx_client`) and opens a capture window per capture (cudaProfilerStart/Stop, or an
NVTX range with ``capture_range: nvtx``); on the Ray controller it starts profiled workers under
``nsys profile`` with ``capture-range-end=repeat-shutdown:N`` computed from the plan. See README.md.

Importing this package is cheap: the NVTX tool and torch are loaded when first needed.

Helpers for the driver and for after the run:

* :func:`controller_runtime_env`, :func:`controller_command`, :func:`controller_nsight_options`
* :func:`relocate_pending` (also ``rlprof relocate <run dir>`` / ``python -m rlprof_nsys relocate``)
* ``rlprof report`` shows each report's NVTX ranges (:func:`rlprof_nsys.nvtx_summary.nvtx_details`, the backend's ``report_details`` hook)
"""

from __future__ import annotations

from .launch import controller_command, controller_nsight_options, controller_runtime_env
from .relocation import relocate_pending

__all__ = ["NsysBackend", "controller_command", "controller_nsight_options", "controller_runtime_env", "relocate_pending"]


def __getattr__(name: str):
    if name == "NsysBackend":
        from .backend import NsysBackend

        return NsysBackend
    raise AttributeError(f"module 'rlprof_nsys' has no attribute {name!r}")
