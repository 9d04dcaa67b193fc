"""rlprof-npu: the ``npu`` backend (Ascend NPU capture through torch_npu.profiler).

* :mod:`rlprof_npu.settings`         the ``tool_config.npu`` keys, checked and normalised
* :mod:`rlprof_npu.capture`          level/contents -> torch_npu profiler arguments; mstx ranges
* :mod:`rlprof_npu.backend`          the hooks: when a capture starts, stops and what it lists
* :mod:`rlprof_npu.torch_npu_import` importing torch_npu lazily, and why it failed
* :mod:`rlprof_npu.analyse`          ``rlprof npu-analyse``: offline parse of captures

Importing this package never imports torch_npu (or torch).
"""
