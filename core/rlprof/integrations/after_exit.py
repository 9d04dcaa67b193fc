"""Once a node's workers have exited: what tools wrote at process exit, moved into the run on that node.

Some tools write their output only when the profiled process exits, after rlprof's ``finalize``:
nsys with ``capture-range-end=repeat`` writes every report then, into Ray's nsight folder of that
node; the manifest lists them as ``pending``. Without help the user runs ``rlprof relocate`` on
each node. :meth:`~rlprof.integrations.ray.ProfilingController.after_exit` does it for them: for
each node with pending files it starts a :class:`NodeAgent` actor there (no CPU reserved), which
waits for the workers' processes to be gone, calls every selected tool's ``rlprof.after_exit``
entry point on the node's run directories until nothing is still being written (or the time is
up), and returns what the workers' manifests gained (the relocation records), which the controller
appends to its run directory as it does with every batch. With ``gather: traces`` the files just
moved are then streamed to the controller through the same agent (:class:`~rlprof.integrations.gather.RunFiles`).

The entry point (group :data:`AFTER_EXIT_GROUP`, named as the backend) is ``function(run_dirs) ->
int``: move what is complete, record it in the manifests, return how many files are still being
written (0: done). Only the selected tools' entry points are loaded.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Sequence

from rlprof.integrations.gather import RunFiles
from rlprof.integrations.nodes import ManifestCursor

log = logging.getLogger("rlprof")

AFTER_EXIT_GROUP = "rlprof.after_exit"
POLL_S = 0.5


class NodeAgent(RunFiles):
    """A short-lived actor on one node, serving one run directory there (the workers are gone)."""

    def __init__(self, run_dir: str):
        self.run_dir = Path(run_dir)

    def _rlprof_run_dir(self) -> Path:
        return self.run_dir

    def after_exit(self, tools: Sequence[str], pids: Sequence[int], manifests: dict[str, int],
                   timeout_s: float) -> dict[str, tuple[int, bytes]]:
        """Wait for ``pids`` to exit, run the tools' after-exit functions, and return for each manifest
        (path -> offset the controller has) the complete lines written since: ``{path: (offset, lines)}``."""
        deadline = time.monotonic() + timeout_s
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        for tool, function in after_exit_functions(tools):
            while True:
                try:
                    waiting = int(function([self.run_dir]) or 0)
                except Exception as exc:  # one tool's failure leaves its files where they are, nothing more
                    log.error("rlprof: %s's after-exit step failed on this node: %s: %s", tool, type(exc).__name__, exc)
                    break
                if not waiting or time.monotonic() >= deadline:
                    if waiting:
                        log.warning("rlprof: %s still writes %d file(s) after %.0f s; they stay where the tool "
                                    "writes them", tool, waiting, timeout_s)
                    break
                time.sleep(POLL_S)
        gained = {}
        for path, offset in manifests.items():
            cursor = ManifestCursor(Path(path))
            cursor.offset = offset
            gained[path] = cursor.take()
        return gained


def after_exit_functions(tools: Sequence[str]) -> list[tuple[str, object]]:
    """The selected tools' ``rlprof.after_exit`` functions (a broken one is logged and skipped)."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=AFTER_EXIT_GROUP):
        if ep.name in tools:
            try:
                found.append((ep.name, ep.load()))
            except Exception as exc:
                log.error("rlprof: cannot load %s entry point %r (%s): %s", AFTER_EXIT_GROUP, ep.name, ep.value, exc)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the pid: ours is gone
        return False
    return True
