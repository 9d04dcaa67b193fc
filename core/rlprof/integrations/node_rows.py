"""Each node analyses its own traces; only their breakdown rows travel to the controller.

On a Ray run whose traces stay on their nodes (``gather: none`` or ``manifests``; a node whose files the
controller does not read where they are; with ``gather: traces`` the traces themselves come), ``rlprof report`` on the controller would have the region
timings but no split inside them. So, as a trace becomes whole on its node (its ``artifact`` record, or
the ``written`` one of a file written in the background, reaches the controller in a manifest batch),
the controller's :class:`NodeRows` has that node analyse it: one Ray task per node and batch, pinned to
the node, running ``rlprof breakdown`` in a child process (:func:`analyse_here`). The node keeps the rows
in its run's own folder (the analysis's cache, :func:`rlprof.layout.rows_path`) and sends their bytes back
(kilobytes: rows and the collective calls the waits are matched with); the controller writes them
under its run directory (:func:`rlprof.layout.shipped_rows_path`), where ``rlprof report`` finds them
when the trace is not on its disk (:func:`rlprof.analysis.inside.add_inside`).

Why a Ray task running a child process, not the worker: the worker is the training process, and a
reader thread there would take the interpreter lock from training; the task is another process on
the node (``num_cpus=0``: it never waits for, nor takes, a CPU the trainer reserved), and the child is
``nice``'d, bounded in time, and takes a bad file's memory with it when it ends. It also keeps the
layers apart: integrations never import the analysis, they run its command.

Nothing here fails or holds up training: tasks are submitted after a step's fan-out returned and
collected without waiting, except at ``finalize``, which waits for the last ones only while its
own ``timeout_s`` (counted from its start) lasts; a task that fails or runs out of time is logged once, and that trace's
split is missing from the report (its timings are not).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

from rlprof.integrations.nodes import ManifestBatch, pinned
from rlprof.layout import new_file, rows_path, shipped_rows_path
from rlprof.manifest import WRITTEN, short_node
from rlprof.priority import SPAWN
from rlprof.priority import command as lowered

log = logging.getLogger("rlprof")

CHILD_LIMIT_S = 600.0
"""The longest one node's ``rlprof breakdown`` runs (it is off the training's path; ``finalize`` waits
for it only the controller's ``timeout_s``)."""


def analyse_here(paths: list[str], timeout_s: float) -> dict[str, bytes | str]:
    """On the node that holds ``paths`` (a Ray task): ``rlprof breakdown`` over them in a child process,
    at most ``timeout_s``; for each path the bytes of its rows file, or the reason it has none (one line)."""
    command = lowered("rlprof.cli", "breakdown", "--json", "--workers", "1", *paths)  # rlprof.priority
    try:
        proc = subprocess.run(command, capture_output=True, timeout=timeout_s, **SPAWN)
    except subprocess.TimeoutExpired:
        return dict.fromkeys(paths, f"not analysed within {timeout_s:.0f} s")
    except OSError as exc:
        return dict.fromkeys(paths, f"could not start rlprof breakdown: {exc}")
    try:
        reasons = {e["path"]: e["reason"] for e in json.loads(proc.stdout)["errors"]}
    except (ValueError, KeyError, TypeError):
        last = proc.stderr.decode(errors="replace").strip().splitlines()
        reasons = dict.fromkeys(paths, last[-1] if last else f"rlprof breakdown exited with {proc.returncode}")
    found: dict[str, bytes | str] = {}
    for path in paths:
        kept = rows_path(path)
        try:
            found[path] = kept.read_bytes() if kept is not None else reasons.get(path, "no rows kept (RLPROF_CACHE_DIR is empty)")
        except OSError:
            found[path] = reasons.get(path, "no rows written")
    return found


class NodeRows:
    """The controller's side: which traces each node holds (from the manifest batches), the tasks
    analysing them, and the rows files written into ``run_dir``.

    :param backends: the run's backends; their readers' file name patterns (``trace_reader``) are asked
        when the first batch from another node arrives: a file no reader reads is never sent to be analysed.
    """

    def __init__(self, run_dir: Path, backends: list[str]):
        self.run_dir = run_dir
        self.backends = backends
        self._patterns: dict[str, tuple[str, ...]] | None = None
        self._new: dict[str, list[str]] = {}
        """Ray node id -> traces whose capture closed there and that no task has been asked for yet."""
        self._running: dict[Any, tuple[str, list[str]]] = {}
        """A task's ref -> its node and the traces it reads."""
        self.shipped: dict[str, int] = {}
        """Trace path (on its node) -> bytes of rows that crossed to the controller for it."""
        self.failed: dict[str, str] = {}
        """Trace path -> why it has no rows here."""

    def see(self, batch: ManifestBatch) -> None:
        """Note the traces ``batch`` says are whole (artifact records, written or not written in the background)."""
        if not batch.node:
            return
        if self._patterns is None:
            self._patterns = reader_patterns(self.backends)
        for line in batch.lines.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not _whole_trace(record, self._patterns):
                continue
            self._new.setdefault(batch.node, []).append(os.path.join(batch.run_dir, record["path"]))

    def submit(self) -> None:
        """One task per node for the traces noted since the last call (returns at once)."""
        if not self._new:
            return
        import ray

        new, self._new = self._new, {}
        for node, paths in new.items():
            paths = list(dict.fromkeys(paths))
            try:
                task = ray.remote(analyse_here).options(num_cpus=0, max_retries=0, **pinned(node))
                self._running[task.remote(paths, CHILD_LIMIT_S)] = (node, paths)
            except Exception as exc:  # never into training
                self._lost(paths, f"could not ask node {short_node(node)}: {exc}")

    def collect(self, wait_s: float = 0.0) -> None:
        """Write the rows of the tasks done (waiting at most ``wait_s`` for the others)."""
        if not self._running:
            return
        import ray

        ready, _ = ray.wait(list(self._running), num_returns=len(self._running), timeout=wait_s)
        for ref in ready:
            node, paths = self._running.pop(ref)
            try:
                answers = ray.get(ref)
            except Exception as exc:
                self._lost(paths, f"the analysis on node {short_node(node)} failed: {type(exc).__name__}")
                continue
            reasons: dict[str, list[str]] = {}
            for path, answer in answers.items():
                if isinstance(answer, bytes):
                    self._write(node, path, answer)
                else:
                    reasons.setdefault(answer, []).append(path)
            for reason, lost in reasons.items():
                self._lost(lost, reason)

    def finish(self, timeout_s: float) -> None:
        """At ``finalize``: submit the last traces and wait for every task, at most ``timeout_s``."""
        self.submit()
        self.collect(timeout_s)
        if self._running:
            self._lost([p for _, paths in self._running.values() for p in paths],
                       f"not analysed within the controller's {timeout_s:.0f} s")
            self._running.clear()

    def _write(self, node: str, trace: str, data: bytes) -> None:
        target = shipped_rows_path(self.run_dir, node, trace)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:
            with new_file(temporary, self.run_dir) as handle:
                handle.write(data)
            os.replace(temporary, target)
        except OSError as exc:
            self._lost([trace], f"cannot write {target}: {exc}")
            return
        self.shipped[trace] = len(data)

    def _lost(self, paths: list[str], reason: str) -> None:
        for path in paths:
            self.failed[path] = reason
        log.warning("rlprof: no breakdown rows for %d trace(s) (%s): %s", len(paths), reason,
                    ", ".join(os.path.basename(p) for p in paths[:3]))


def _whole_trace(record: Any, patterns: dict[str, tuple[str, ...]]) -> bool:
    """An artifact record of a file that is whole now and that its backend's reader reads."""
    if not isinstance(record, dict) or record.get("type") != "artifact" or record.get("kind") == "pending":
        return False
    if record.get("state") not in (None, WRITTEN) or not isinstance(record.get("path"), str):
        return False
    name = os.path.basename(record["path"])
    return any(fnmatch.fnmatch(name, p) for p in patterns.get(str(record.get("backend")), ()))


def reader_patterns(backends: list[str]) -> dict[str, tuple[str, ...]]:
    """Backend name -> its reader's file name patterns, asked once through the ``trace_reader`` hook
    (the one plugin loader); a backend without a reader, or one that fails to answer, has none."""
    from rlprof import plugins
    from rlprof.hookspecs import TraceReader

    found, _ = plugins.implementations("trace_reader", backends)
    patterns = {}
    for implementation in found:
        try:
            reader = implementation.call()
        except Exception:  # its files are simply not analysed on the nodes; `rlprof report` says why
            continue
        if isinstance(reader, TraceReader):
            patterns[implementation.owner] = tuple(reader.patterns)
    return patterns
