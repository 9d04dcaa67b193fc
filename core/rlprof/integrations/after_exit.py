"""Once a node's workers have exited: what tools wrote at process exit, moved into the run on that node.

Some tools write their output only when the profiled process exits, after rlprof's ``finalize``:
nsys with ``capture-range-end=repeat`` writes every report then, into Ray's nsight folder of that
node; the manifest lists them as ``pending``. Without help the user runs ``rlprof relocate`` on
each node. :meth:`~rlprof.integrations.ray.ProfilingController.after_exit` does it for them: for
each node with pending files it starts a :class:`NodeAgent` actor there (no CPU reserved), which
waits for the workers' processes to be gone, calls every selected tool's ``after_exit`` hook
on the node's run directories until nothing is still being written (or the time is
up), and returns what the workers' manifests gained (the relocation records), which the controller
appends to its run directory as it does with every batch. With ``gather: traces`` the files just
moved are then streamed to the controller through the same agent (:class:`~rlprof.integrations.gather.RunFiles`).

What runs there is each selected backend's ``after_exit`` hook (:func:`rlprof.hookspecs.after_exit`:
``after_exit(run_dirs) -> int``, how many files are still being written), found by the one plugin
loader (:func:`rlprof.plugins.implementations`), or the deprecated ``rlprof.after_exit`` entry point
of that name. Only the selected tools are loaded.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Sequence

from rlprof import plugins
from rlprof.integrations.gather import RunFiles
from rlprof.integrations.nodes import ManifestCursor

log = logging.getLogger("rlprof")

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
        for step in after_exit_steps(tools):
            while True:
                try:
                    waiting = int(step.call(run_dirs=[self.run_dir]) or 0)
                except Exception as exc:  # one tool's failure leaves its files where they are, nothing more
                    log.error("rlprof: %s", step.problem(f"after_exit failed on this node: {type(exc).__name__}: {exc}"))
                    break
                if not waiting or time.monotonic() >= deadline:
                    if waiting:
                        log.warning("rlprof: %s still writes %d file(s) after %.0f s; they stay where the tool "
                                    "writes them", step.owner, waiting, timeout_s)
                    break
                time.sleep(POLL_S)
        gained = {}
        for path, offset in manifests.items():
            cursor = ManifestCursor(Path(path))
            cursor.offset = offset
            gained[path] = cursor.take()
        return gained


def after_exit_steps(tools: Sequence[str]) -> list[plugins.Implementation]:
    """The selected tools' after-exit steps: each backend's ``after_exit`` hook (or its deprecated
    ``rlprof.after_exit`` entry point). One that cannot be loaded is logged, in the loader's one line
    naming distribution and version, and skipped."""
    found, problems = plugins.implementations("after_exit", tools)
    for _, line in problems:
        log.error("rlprof: after-exit step skipped on this node: %s", line)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds the pid: ours is gone
        return False
    return True
