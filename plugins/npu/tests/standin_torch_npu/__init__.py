"""A STAND-IN for torch_npu, for tests only. It profiles nothing.

Why it exists: the machines that run rlprof's tests have no Ascend NPU and no CANN toolkit, so the
real torch_npu cannot even be imported there (its extension needs ``libhccl.so``). The behaviour
tests of the ``npu`` backend still need to see exactly what the backend asks torch_npu to do.

What it is: the few modules, classes and functions of torch_npu that rlprof-npu calls, with the
real signatures, recording every call in :data:`standin_torch_npu.recording.LOG` and writing a
placeholder ``*_ascend_pt`` directory where the real profiler would. ``test_npu_api_conformance.py``
checks every name and signature here against the real torch-npu wheel (read with ``ast``, never
imported), so the stand-in cannot drift into an API that does not exist.

How it is used: the ``torch_npu_standin`` fixture (``conftest.py``) puts these modules into
``sys.modules`` under the real names listed in :data:`MIRRORS` for one test only.
"""

from . import npu, profiler

__all__ = ["npu", "profiler"]

MIRRORS = {
    "standin_torch_npu": "torch_npu",
    "standin_torch_npu.profiler": "torch_npu.profiler",
    "standin_torch_npu.profiler.profiler": "torch_npu.profiler.profiler",
    "standin_torch_npu.profiler.experimental_config": "torch_npu.profiler.experimental_config",
    "standin_torch_npu.npu": "torch_npu.npu",
    "standin_torch_npu.npu.mstx": "torch_npu.npu.mstx",
}
"""Stand-in module -> the real torch_npu module it mirrors (installed under that name in tests)."""
