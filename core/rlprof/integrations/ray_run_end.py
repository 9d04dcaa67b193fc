"""The end of a Ray run, on the controller: the finish hook once per node, gathering, after-exit.

What happens after the last profiled step, in the order the controller does it:

1. :class:`NodeFinishHooks`: when the last profiled step's captures are written on every node,
   ``finish_hook_cmd`` starts on one worker per node (:func:`~rlprof.integrations.nodes.finish_hook_runners`),
   not waited for, so training goes on; ``finalize`` waits for them.
2. :func:`worker_sources`: with ``gather: traces``, what every finalized worker wrote, to be streamed
   to the controller (:mod:`rlprof.integrations.gather`).
3. :func:`move_after_exit`: once the workers have exited, what tools wrote at process exit is moved
   into the run on each node (:mod:`rlprof.integrations.after_exit`), its records reach the
   controller's run directory, and the moved files are returned for gathering.

Each takes exactly what it reads of the controller; the controller composes them.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Mapping

from rlprof.integrations.gather import Source, gathered_paths
from rlprof.integrations.nodes import ManifestBatch, RunCollector, finish_hook_runners
from rlprof.integrations.ray_fanout import Dead, Workers, describe_error
from rlprof.manifest import short_node

log = logging.getLogger("rlprof")


class NodeFinishHooks:
    """``finish_hook_cmd`` run by the controller's choice, once per node (not by every worker).

    ``command`` is None when the workers run it themselves (steps the caller decides) or there is
    none; the controller then ships the config unchanged."""

    def __init__(self, config: Any):
        g = config.global_
        self.command: str | None = g.finish_hook_cmd if config.enabled and g.steps and not g.caller_steps else None
        self.last_step: int | None = max(g.steps) if self.command else None
        """After this step's end the hooks start."""
        self.runners: dict[str, dict[str, str]] = {}
        """Worker label -> the node's part of its environment (one worker per node)."""
        self.started: dict[str, Any] = {}
        """Worker label -> the ref of its start call."""
        self.statuses: dict[str, int | None] = {}
        """After :meth:`wait`: each node's hook exit status, by the worker that ran it (None: no answer)."""

    def choose(self, config: Any, workers: Workers, infos: Mapping[str, Mapping[str, Any]]) -> None:
        """After ``setup``: which worker runs the hook on each node."""
        if self.command:
            specs = {label: (worker.spec, worker.handle) for label, worker in workers}
            self.runners = finish_hook_runners(config, specs, dict(infos))

    def start(self, workers: Workers) -> None:
        """On every node's chosen worker that is still there, once."""
        for label, node_env in self.runners.items():
            if isinstance(workers[label].state, Dead) or label in self.started:
                continue
            try:
                self.started[label] = workers[label].handle.rlprof_start_finish_hook.remote(self.command, node_env)
            except Exception as exc:
                log.error("rlprof: could not start the finish hook on %s: %s", label, describe_error(exc))

    def wait(self, workers: Workers, timeout_s: float) -> None:
        """Wait for the hooks started (their own limit plus ``timeout_s``); fills :attr:`statuses`."""
        import ray

        from rlprof.runtime.finish_hook import wait_limit_s

        if not self.started:
            return
        refs = {}
        for label in self.started:
            if not isinstance(workers[label].state, Dead):
                try:
                    refs[workers[label].handle.rlprof_wait_finish_hook.remote()] = label
                except Exception:  # the worker is gone: nothing to wait for
                    pass
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=wait_limit_s() + timeout_s) if refs else ([], [])
        self.statuses = dict.fromkeys(refs.values())
        for ref in ready:
            try:
                self.statuses[refs[ref]] = ray.get(ref)
            except Exception as exc:
                log.error("rlprof: the finish hook on %s: %s", refs[ref], describe_error(exc))


def worker_sources(finals: Mapping[str, Any], workers: Workers, infos: Mapping[str, Mapping[str, Any]],
                   collector: RunCollector | None) -> list[Source]:
    """A :class:`~rlprof.integrations.gather.Source` per worker that finalized (``finals``: label ->
    artifact records), except those whose files the controller already reads where they are (same
    machine or shared disk)."""
    sources = []
    for label, records in finals.items():
        info = infos.get(label) or {}
        if not info.get("run_dir"):
            continue
        if collector is not None and info.get("manifest") in collector.visible:
            continue
        sources.append(Source(workers[label].handle, info.get("node"), Path(info["run_dir"]), gathered_paths(records)))
    return sources


def move_after_exit(pending: Mapping[str, Any], infos: Mapping[str, Mapping[str, Any]], collector: RunCollector | None,
                    *, tools: list[str], run_id: str, gather: bool, timeout_s: float, reply_s: float
                    ) -> tuple[list[Source], list[Any]]:
    """For every node with ``pending`` files (worker label -> its pending records): a
    :class:`~rlprof.integrations.after_exit.NodeAgent` there runs the tools' after-exit step (at most
    ``timeout_s``, plus ``reply_s`` for the reply); the records the workers' manifests gained go to
    ``collector``. Returns, with ``gather``, the moved files the controller does not see (to gather
    through the agents), and the agents, which the caller kills once it has gathered."""
    import ray

    from rlprof.integrations.after_exit import NodeAgent
    from rlprof.integrations.nodes import pinned

    groups: dict[tuple[str | None, str], list[str]] = {}
    for label in pending:
        info = infos.get(label) or {}
        if info.get("run_dir") and info.get("manifest"):
            groups.setdefault((info.get("node"), info["run_dir"]), []).append(label)
    agents, asked = [], {}
    for (node, run_dir), labels in groups.items():
        agent = ray.remote(NodeAgent).options(num_cpus=0, **(pinned(node) if node else {})).remote(run_dir)
        agents.append(agent)
        offsets = {infos[l]["manifest"]: collector.received.get(infos[l]["manifest"], 0)
                   if collector is not None else 0 for l in labels}
        asked[agent.after_exit.remote(tools, [int(infos[l]["pid"]) for l in labels], offsets, timeout_s)] = \
            (agent, node, run_dir, labels)
    sources = []
    ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=timeout_s + reply_s) if asked else ([], [])
    for ref in ready:
        agent, node, run_dir, labels = asked[ref]
        try:
            gained = ray.get(ref)
        except Exception as exc:
            log.error("rlprof: the after-exit step on node %s failed: %s", short_node(node), describe_error(exc))
            continue
        moved = []
        for label in labels:
            info = infos[label]
            offset, lines = gained.get(info["manifest"], (0, b""))
            if lines and collector is not None:
                collector.receive(ManifestBatch(
                    name=os.path.basename(info["manifest"]), path=info["manifest"], node=node, host=info["host"],
                    run=run_id, rank=info["rank"], pid=info["pid"], run_dir=run_dir, offset=offset, lines=lines))
            moved += _artifacts_in(lines)
        if gather and collector is not None and not any(infos[l]["manifest"] in collector.visible for l in labels):
            sources.append(Source(agent, node, Path(run_dir), gathered_paths(moved)))
    return sources, agents


def _artifacts_in(lines: bytes) -> list[dict[str, Any]]:
    """The ``artifact`` records among manifest lines."""
    found = []
    for line in lines.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") == "artifact":
            found.append(record)
    return found
