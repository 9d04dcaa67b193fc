"""rlprof backends built on PyTorch's own tools.

* ``torch`` (:mod:`rlprof_torch.backend`): a torch.profiler Chrome trace per capture window, with
  every role region as a named range and rank metadata that Holistic Trace Analysis understands.
* ``torch_memory`` (:mod:`rlprof_torch.memory`): a CUDA caching-allocator snapshot per capture window.

Select them with ``global_profiler.tool: torch`` (or ``[torch, torch_memory]``); the core finds
them through the ``rlprof.backends`` entry points declared in this distribution's pyproject.toml.
"""

__version__ = "0.1.0"
