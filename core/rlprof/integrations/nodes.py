"""Many nodes, one run directory: the workers' manifest records reach the controller through Ray.

Each worker writes its manifest on its own node (``<node save_path>/<run>/manifest/rank<R>-<host>-<pid>.jsonl``).
A report built on one node would see only that node's ranks, and a node that is lost takes its
records with it. So every reply a worker sends the controller at a profiled step's end and at
finalize carries a :class:`ManifestBatch`: the complete lines its manifest gained since the last
reply (one batch per worker per step, never one message per record; Ray carries it in the reply to
a call the controller makes anyway). The controller's :class:`RunCollector` appends each batch to a
file of the same name in **its** run directory, headed by one ``node`` record (Ray node id, host,
the worker's run directory on its node), so ``rlprof report <controller save_path>`` sees every
rank of every node, says on which node each artifact lives, and still has a lost node's records
up to its last step.

When the worker's manifest path is the controller's target and the controller reads the batch's very
bytes there (same machine and save path, the usual single-machine run, or a save path on a file system
every node shares), nothing is copied. The bytes are compared, not only the paths: node-local disks
often use the same path on every node.

``RLPROF_NODE_SAVE_PATH`` (in a node's environment: the raylet's, so every worker started there has
it) replaces ``global_profiler.save_path`` for the workers of that node. It is how simulated nodes on
one machine (``ray.cluster_utils.Cluster``, ``rlprof demo --nodes N``) get disks of their own, and how a
cluster whose nodes keep scratch space at different paths says where each writes.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlprof.manifest import ManifestWriter, NodeRecord, short_node

log = logging.getLogger("rlprof")

NODE_SAVE_PATH_ENV = "RLPROF_NODE_SAVE_PATH"
"""A node's own save path for its workers, in place of ``global_profiler.save_path``."""


def node_save_path() -> str | None:
    """This node's save path (:data:`NODE_SAVE_PATH_ENV`), or None to use the configured one."""
    return os.environ.get(NODE_SAVE_PATH_ENV) or None


def current_node() -> str | None:
    """The Ray node id of this process, or None outside Ray."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        return ray.get_runtime_context().get_node_id()
    except Exception:  # a profiler never fails over where it runs
        return None


# ------------------------------------------------------------------------------ worker side


@dataclass
class ManifestBatch:
    """The lines one worker's manifest gained since its last batch, and whose they are."""

    name: str
    """The manifest's file name (``rank<R>-<host>-<pid>.jsonl``)."""
    path: str
    """The manifest's absolute path on its node."""
    node: str | None
    host: str
    run: str
    rank: int | None
    pid: int
    run_dir: str
    """The worker's run directory on its node (artifact paths are relative to it)."""
    offset: int
    """Where ``lines`` start in the worker's manifest."""
    lines: bytes


@dataclass
class Sent:
    """A worker's reply to the controller: the call's own value and the manifest batch riding with it."""

    value: Any
    batch: ManifestBatch | None


class ManifestCursor:
    """Reads what a manifest file gained since the last :meth:`take`, complete lines only (a line being
    written is taken next time). Reads the file rather than keeping a copy in memory: what the
    controller receives is exactly what the node holds."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def take(self) -> tuple[int, bytes]:
        """``(offset, lines)``: the complete lines written since the last call and where they start."""
        start = self.offset
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:  # not written yet (nothing profiled), or removed: nothing to send
            return start, b""
        end = data.rfind(b"\n") + 1
        self.offset += end
        return start, data[:end]


def batch_of(prof: Any, cursor: ManifestCursor) -> ManifestBatch | None:
    """The batch of ``prof``'s process manifest read through ``cursor``; None when there is nothing new."""
    offset, lines = cursor.take()
    if not lines:
        return None
    run = prof.run
    return ManifestBatch(name=cursor.path.name, path=str(cursor.path), node=current_node(), host=run.host,
                         run=run.run_id, rank=run.rank, pid=run.pid, run_dir=str(run.run_dir), offset=offset,
                         lines=lines)


# ------------------------------------------------------------------------------ controller side


class RunCollector:
    """The controller's end: appends each worker's batches to ``<run_dir>/manifest/<name>`` (headed by a
    ``node`` record), and counts what it moved. Never raises into the controller: a failed write is
    logged and counted, the run goes on."""

    def __init__(self, run_dir: Path, node: str | None):
        self.run_dir = run_dir
        self.node = node
        self.bytes_received = 0
        self.batches = 0
        self.lost_batches = 0
        self._targets: dict[str, Path] = {}
        """Worker manifest path -> the controller's copy (started with its ``node`` record)."""
        self.received: dict[str, int] = {}
        """Worker manifest path -> how far into it the controller has its lines."""
        self.visible: set[str] = set()
        """Worker manifests the controller reads where the worker writes them (nothing to copy)."""

    def receive(self, batch: ManifestBatch) -> None:
        self.batches += 1
        self.bytes_received += len(batch.lines)
        self.received[batch.path] = batch.offset + len(batch.lines)
        if batch.path in self.visible:
            return
        target = self._targets.get(batch.path)
        if target is None:
            target = self.run_dir / "manifest" / batch.name
            if os.path.abspath(batch.path) == os.path.abspath(target) and _readable_here(batch):
                self.visible.add(batch.path)
                return
            if target in self._targets.values():  # two nodes with one host name and pid: keep them apart
                target = target.with_name(f"{target.stem}-{short_node(batch.node)}{target.suffix}")
        try:
            if batch.path not in self._targets:
                writer = ManifestWriter(target, {"run": batch.run, "rank": batch.rank, "host": batch.host,
                                                 "pid": batch.pid}, root=self.run_dir)
                written = writer.write_record(NodeRecord(node=batch.node, node_run_dir=batch.run_dir, node_manifest=batch.path))
                writer.close()
                if not written:
                    raise OSError(f"cannot write {target}")
                self._targets[batch.path] = target
            from rlprof.layout import open_file

            with open_file(target, self.run_dir, "ab") as handle:
                handle.write(batch.lines)
        except OSError as exc:
            self.lost_batches += 1
            log.error("rlprof: cannot add %s's manifest records to %s (%s); they are still on node %s",
                      batch.name, target, exc, short_node(batch.node))


def _readable_here(batch: ManifestBatch) -> bool:
    """The controller sees the batch's lines at their offset in the file at the worker's path (which is
    also the controller's target): the file is shared (or this is the worker's machine) and copying it
    would write every line twice."""
    try:
        with open(batch.path, "rb") as handle:
            handle.seek(batch.offset)
            return handle.read(len(batch.lines)) == batch.lines
    except OSError:
        return False


def sha256_of(path: Path, chunk: int = 8 << 20) -> str:
    """The SHA-256 of a file, read in ``chunk``-byte pieces (memory independent of its size)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            data = handle.read(chunk)
            if not data:
                return digest.hexdigest()
            digest.update(data)


@dataclass
class SimulatedCluster:
    """A ``ray.cluster_utils.Cluster`` and its nodes' Ray ids, in the order of their roots."""

    cluster: Any
    node_ids: list[str]

    def shutdown(self) -> None:
        self.cluster.shutdown()


def simulated_cluster(roots: list[Path], *, num_cpus: int = 1, connect: bool = True) -> SimulatedCluster:
    """A ``ray.cluster_utils.Cluster`` of ``len(roots)`` nodes on this machine, node ``i`` writing under
    ``roots[i]`` (its :data:`NODE_SAVE_PATH_ENV`), each with ``num_cpus`` CPUs; connected to when
    ``connect``. For tests and ``rlprof demo --nodes N``: "node-local" files are then really apart.
    The caller shuts it down (``ray.shutdown()``, then ``.shutdown()``)."""
    import ray
    from ray.cluster_utils import Cluster

    def node(root: Path) -> dict[str, Any]:
        return {"num_cpus": num_cpus, "env_vars": {NODE_SAVE_PATH_ENV: str(root)}}

    cluster = Cluster(initialize_head=True, head_node_args={**node(roots[0]), "include_dashboard": False})
    try:
        ids = [cluster.head_node.node_id] + [cluster.add_node(**node(root)).node_id for root in roots[1:]]
        if connect:
            ray.init(address=cluster.address, logging_level=logging.WARNING, log_to_driver=False)
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return SimulatedCluster(cluster, ids)


def pinned(node_id: str) -> dict[str, Any]:
    """``.options(**pinned(node))``: the actor runs on that node and nowhere else."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=False)}


# ------------------------------------------------------------------------------ the finish hook, once per node


def finish_hook_runners(config: Any, workers: dict[str, tuple[Any, Any]], infos: dict[str, dict[str, Any]]
                        ) -> dict[str, dict[str, str]]:
    """Which worker runs ``finish_hook_cmd`` on each node, and the node's part of its environment.

    On each Ray node (each host, where Ray did not say) the lowest rank among the workers the usual
    rule picks (``finish_hook_all_ranks``, ``finish_hook_ranks``, else the ranks that profile) runs
    it, once, for the whole node: the guides' "one rank per node uploads that node's directory". Its
    environment adds ``RLPROF_NODE_ID``, ``RLPROF_NODE_RANKS`` (comma list of that node's ranks) and
    ``RLPROF_NODE_RUN_DIRS`` (the run directories of that node's workers, ``os.pathsep``-separated).
    Returns ``{worker label: node environment}``."""
    g = config.global_
    nodes: dict[str, list[tuple[int, str, dict[str, Any]]]] = {}
    for label, info in infos.items():
        spec = workers[label][0]
        nodes.setdefault(info.get("node") or f"host:{info.get('host')}", []).append((spec.rank, label, info))
    runners = {}
    for node, members in nodes.items():
        chosen = [m for m in members if g.finish_hook_all_ranks
                  or (g.finish_hook_ranks is not None and m[0] in g.finish_hook_ranks)
                  or (g.finish_hook_ranks is None and m[2].get("active"))]
        if not chosen:
            continue
        rank, label, _ = min(chosen, key=lambda m: (m[0], m[1]))
        run_dirs = list(dict.fromkeys(str(m[2].get("run_dir")) for m in sorted(members, key=lambda m: m[0])))
        runners[label] = {"RLPROF_NODE_ID": "" if node.startswith("host:") else node,
                          "RLPROF_NODE_RANKS": ",".join(str(m[0]) for m in sorted(members, key=lambda m: m[0])),
                          "RLPROF_NODE_RUN_DIRS": os.pathsep.join(run_dirs)}
    return runners
