"""``rlprof breakdown --address ADDR``: joining a running Ray cluster, and each file read on the node that holds it.

The command asks for the cluster here (the analysis never starts or joins Ray): it checks that something
listens at the address, joins it, runs one task per node (which paths it holds; then
:func:`rlprof.analysis.breakdown_files.read_here` over them), matches waits across every node's files, and
leaves the cluster.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Sequence

from rlprof.analysis.breakdown import apportion_waits
from rlprof.row_model import Row
from rlprof.analysis.breakdown_files import read_here


class ClusterUnreachable(RuntimeError):
    """``--address`` names no Ray cluster this process can join (the message is the user's one line)."""


def on_cluster(address: str, paths: Sequence[str],
               timeout_s: float = 600.0) -> tuple[list[Row], list[tuple[str, str]], list[tuple[str, str]]]:
    """``rlprof breakdown --address``: each path read on the node of a running Ray cluster that holds it
    (a task pinned there with ``NodeAffinitySchedulingStrategy``, on no CPU a job reserved), so only its
    rows come back; waits are then matched across every node's files here. Which node holds a path is
    asked of the nodes themselves (one ``os.path.exists`` task each): a path is where it is, whatever
    a manifest once said. A path no node holds costs one line. Returns the rows, ``(path, reason)`` of
    each file that could not be read, and of each file or folder a node's walk passed over (:func:`rlprof.analysis.trace_walk.collect`).

    :raises ClusterUnreachable: Ray is not installed, or no cluster answers at ``address``.
    """
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise ClusterUnreachable("--address needs Ray (pip install 'ray[default]')") from None
    unreachable = _unreachable(address)
    if unreachable:
        raise ClusterUnreachable(f"cannot reach a Ray cluster at {address}: {unreachable}")
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:  # ConnectionError, a bad address (ValueError), Ray's own errors
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ClusterUnreachable(f"cannot reach a Ray cluster at {address}: {reason}") from None
    try:
        def on(node: str):
            return {"num_cpus": 0, "scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=False)}

        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        held = dict(zip(nodes, _answers([ray.remote(_held_here).options(**on(n)).remote(list(paths)) for n in nodes],
                                        timeout_s)))
        where: dict[str, list[str]] = {}
        errors = []
        for path in paths:
            node = next((n for n in nodes if isinstance(held[n], set) and path in held[n]), None)
            if node is None:
                errors.append((path, "on no node of the cluster"))
            else:
                where.setdefault(node, []).append(path)
        answers = _answers([ray.remote(read_here).options(**on(n)).remote(mine) for n, mine in where.items()], timeout_s)
    finally:
        ray.shutdown()
    results, skipped = [], []
    for mine, answer in zip(where.values(), answers):
        if isinstance(answer, str):
            errors += [(path, answer) for path in mine]
        else:
            results += answer[0]
            errors += answer[1]
            skipped += answer[2]
    apportion_waits([(result.trace, result.rows) for result in results])
    return [row for result in results for row in result.rows], errors, skipped


def _answers(refs: list, timeout_s: float) -> list:
    """Each task's value, or one line saying why there is none (a node's failure costs its files only)."""
    import ray

    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    found = []
    for ref in refs:
        if ref not in ready:
            found.append(f"no answer from its node within {timeout_s:.0f} s")
            continue
        try:
            found.append(ray.get(ref))
        except Exception as exc:
            found.append(f"the task on its node failed: {type(exc).__name__}")
    return found


CONNECT_S = 5.0
"""How long ``--address host:port`` is given to accept a connection before it is called unreachable."""


def _unreachable(address: str) -> str | None:
    """Why nothing listens at ``address``'s ``host:port`` (None: something does, or the address is
    ``auto``, which Ray resolves itself and fails fast on). Asked first because ``ray.init`` retries
    an address where nothing listens for ever, printing a warning every few seconds."""
    host, _, port = address.rpartition("://")[2].rpartition(":")
    if not host:
        return None
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_S):
            return None
    except ValueError:
        return f"{port!r} is not a port number"
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _held_here(paths: list[str]) -> set[str]:
    """On one node: which of ``paths`` are there."""
    return {path for path in paths if os.path.exists(path)}
