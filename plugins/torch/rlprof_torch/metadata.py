"""What a trace says about itself: the top-level JSON keys rlprof adds to every Chrome trace.

Two keys, both written with ``profile.add_metadata_json`` just before the capture stops:

* ``rlprof`` — run id, global rank, world size, host, pid, capture id, the training step numbers,
  roles and regions the capture saw, and ``stop_path``: how the capture was to end (``nogil``: stopped,
  saved and freed without the GIL; ``torch``: torch's own calls, :mod:`rlprof_torch.nogil`). Lets a
  trace found on its own be placed in the run without the manifest. A capture that counts FLOPs adds
  ``peak``: the peak its MFU is divided by (:class:`rlprof.peak.Peak`), which the reader puts in each row.
* ``distributedInfo`` — ``{"backend", "rank", "world_size"}``, the block Holistic Trace Analysis
  reads to tell the processes of a multi-rank job apart (it takes the first ``"rank": N`` in the
  file; a trace without one is taken for rank 0, so every rank but one would be lost). torch
  writes this block itself when ``torch.distributed`` is initialized; then rlprof leaves it alone,
  because torch's block is richer (process groups) and a second copy would overwrite it.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

NO_PROCESS_GROUP = "none"
"""``distributedInfo.backend`` when no torch process group exists (e.g. a Ray worker before init)."""


def torch_writes_distributed_info() -> bool:
    """torch adds ``distributedInfo`` on its own when a default process group is initialized."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def trace_metadata(run, capture_id: str, training_steps: Iterable[int], roles: Iterable[str], regions: Iterable[str],
                   *, distributed_info: bool, stop_path: str | None = None, peak: Any = None) -> dict[str, str]:
    """``{key: JSON text}`` for :meth:`torch.profiler.profile.add_metadata_json`.

    :param run: the :class:`rlprof.context.RunInfo` of the process.
    :param distributed_info: add ``distributedInfo`` (False when torch already wrote it at start).
    :param stop_path: the path the stop is to take (:data:`rlprof_torch.nogil.NOGIL` or ``TORCH``).
    """
    info: dict[str, Any] = {
        "run_id": run.run_id,
        "global_rank": run.rank,
        "world_size": run.world_size,
        "replica_rank": run.replica_rank,
        "host": run.host,
        "pid": run.pid,
        "capture": capture_id,
        "training_steps": list(dict.fromkeys(training_steps)),
        "roles": list(dict.fromkeys(roles)),
        "regions": list(dict.fromkeys(regions)),
    }
    if stop_path is not None:
        info["stop_path"] = stop_path
    if peak is not None:
        info["peak"] = peak
    # HTA finds the rank with the pattern '"rank":\s+N' (so json.dumps' default ": " separator matters),
    # and takes the first match: the rlprof block says "global_rank" so it can never be that match.
    metadata = {"rlprof": json.dumps(info)}
    if distributed_info:
        metadata["distributedInfo"] = json.dumps({"backend": NO_PROCESS_GROUP, "rank": run.rank, "world_size": run.world_size})
    return metadata
