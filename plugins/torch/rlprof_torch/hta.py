"""Put the per-rank traces of one capture in one directory, the shape Holistic Trace Analysis reads.

rlprof writes each process's files under its own ``<capture>/rank<R>-<host>-<pid>/torch/``; HTA's
``TraceAnalysis(trace_dir=...)`` wants every rank's trace side by side in a single directory and
tells one rank from another by ``distributedInfo.rank`` inside each file (which the torch backend writes).
HTA keeps one trace per rank: if two processes share a rank (a critic process beside the
actor process on the same GPU), it uses one of them and warns.

::

    from rlprof_torch.hta import gather_traces
    from hta.trace_analysis import TraceAnalysis
    analysis = TraceAnalysis(trace_dir=str(gather_traces(run_dir, "step2")))
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rlprof.backend_api import artifacts


def gather_traces(run_dir: os.PathLike | str, capture: str, dest: os.PathLike | str | None = None, *, backend: str = "torch") -> Path:
    """Link (or copy, where links are not allowed) every process's trace of ``capture`` into ``dest``.

    :param run_dir: ``<save_path>/<run_id>``; every node's manifest under it is read.
    :param capture: a capture id from the manifest, e.g. ``step2`` or ``step2.actor_update``.
    :param dest: the directory to fill; default ``<run_dir>/hta/<capture>``.
    :returns: ``dest``. Files are named ``rank<R>-<host>-<pid>.pt.trace.json.gz``, never overwritten.
    """
    run_dir = Path(run_dir)
    dest = Path(dest) if dest is not None else run_dir / "hta" / capture
    dest.mkdir(parents=True, exist_ok=True)
    for record in artifacts([run_dir]):
        if record.get("backend") != backend or record.get("capture") != capture:
            continue
        source = Path(record["_run_dir"]) / record["path"]
        target = dest / f"rank{record['rank']}-{record['host']}-{record['pid']}.pt.trace.json.gz"
        if target.exists() or target.is_symlink():
            continue
        try:
            target.symlink_to(source.resolve())
        except OSError:
            shutil.copyfile(source, target)
    return dest
