"""A gloo checkpoint engine for verl 0.9.1's disaggregated weight sync, on a machine without NCCL.

verl's fully async trainer sends the actor's weights to the standalone rollout replicas through a
checkpoint engine (``CheckpointEngineManager.update_weights``: abort the replicas, build a process
group between the actor's workers and the replicas' ``CheckpointEngineWorker``s, ``send_weights`` on
the actor, ``receive_weights`` on the rollout workers, finalize, resume). Its shipped config asks for
``nccl``, whose engine imports cupy and broadcasts CUDA buffers; nothing of it runs on a CPU.

This module registers ``gloo`` in verl's ``CheckpointEngineRegistry``, loaded through verl's own hook
for that (``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl_cpu_checkpoint_engine``,
imported by every process that builds an engine or the manager). It keeps verl's protocol and
replaces only the transport: one sender (actor rank 0) and every rollout worker join a gloo group of
their own (a ``TCPStore`` that the sender opens in ``prepare``, a ``ProcessGroupGloo`` beside the
workers' default group, rebuilt at each sync), and each bucket goes as three broadcasts: its sizes,
its pickled layout, its bytes. Buckets are cut and joined by verl's ``split_weight_chunks`` /
``merge_weight_chunks``, so a tensor larger than a bucket travels in pieces as with NCCL. The
blocking gloo calls run in a thread, so the worker's event loop keeps answering meanwhile.
"""

from __future__ import annotations

import asyncio
import datetime
import pickle
from dataclasses import dataclass
from typing import AsyncGenerator

import ray
import torch
import torch.distributed as dist

from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    merge_weight_chunks,
    split_weight_chunks,
)

BACKEND = "gloo"
TIMEOUT = datetime.timedelta(minutes=10)
ALIGN = 16  # bytes


@dataclass
class SenderAddress:
    """Where the rollout workers find the sender's store (``prepare`` on actor rank 0)."""

    host: str
    port: int


@CheckpointEngineRegistry.register(BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    """Broadcasts the actor's weights from actor rank 0 to every rollout worker over gloo.

    Args:
        bucket_size: the most bytes one broadcast carries
            (``checkpoint_engine.update_weights_bucket_megabytes``; allocated per bucket, never ahead).
        is_master: True on actor rank 0, the one sender.
    """

    def __init__(self, bucket_size: int, is_master: bool = False, **_ignored) -> None:
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.rank = -1
        self._store = None
        self._group = None

    # ---- topology ---------------------------------------------------------------------------
    def prepare(self) -> SenderAddress | None:
        if not self.is_master:
            return None
        host = ray.util.get_node_ip_address().strip("[]")
        # port 0: the store binds a free port itself, no race with another process
        self._store = dist.TCPStore(host, 0, None, True, timeout=TIMEOUT, wait_for_workers=False)
        return SenderAddress(host=host, port=self._store.port)

    @classmethod
    def build_topology(cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list):
        sender = metadata[0]
        assert isinstance(sender, SenderAddress), f"actor rank 0 must be the sender, got {sender!r}"
        world_size = 1 + rollout_world_size
        actor_kwargs = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "sender": [sender] * actor_wg_world_size,
        }
        rollout_kwargs = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "sender": [sender] * rollout_world_size,
        }
        return actor_kwargs, rollout_kwargs

    def init_process_group(self, rank: int, world_size: int, sender: SenderAddress):
        self.rank = rank
        if rank < 0:
            return
        if self._store is None:
            self._store = dist.TCPStore(sender.host, sender.port, None, False, timeout=TIMEOUT)
        self._group = dist.ProcessGroupGloo(self._store, rank, world_size, TIMEOUT)

    def finalize(self):
        self._group = None
        self._store = None
        self.rank = -1

    # ---- transport --------------------------------------------------------------------------
    def _broadcast(self, tensor: torch.Tensor) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        self._group.broadcast([tensor], opts).wait()

    def _send_bucket(self, layout: list, payload: torch.Tensor, is_last: bool) -> None:
        header = torch.tensor(list(pickle.dumps((layout, is_last))), dtype=torch.uint8)
        self._broadcast(torch.tensor([header.numel(), payload.numel()], dtype=torch.int64))
        self._broadcast(header)
        self._broadcast(payload)

    def _receive_bucket(self) -> tuple[list, bool, torch.Tensor]:
        sizes = torch.zeros(2, dtype=torch.int64)
        self._broadcast(sizes)
        header = torch.empty(int(sizes[0]), dtype=torch.uint8)
        self._broadcast(header)
        payload = torch.empty(int(sizes[1]), dtype=torch.uint8)
        self._broadcast(payload)
        layout, is_last = pickle.loads(header.numpy().tobytes())
        return layout, is_last, payload

    @torch.no_grad()
    async def send_weights(self, weights, global_steps: int | None = None):
        if self.rank < 0:  # not in the group: producing each weight may still be collective
            async for _ in split_weight_chunks(weights, self.bucket_size, meta_only=True):
                pass
            return {}
        assert self.rank == 0, "rollout workers receive, they do not send"
        layout, parts, filled = [], [], 0
        async for meta, chunk in split_weight_chunks(weights, self.bucket_size):
            if filled + meta.chunk_size > self.bucket_size and parts:
                await asyncio.to_thread(self._send_bucket, layout, torch.cat(parts), False)
                layout, parts, filled = [], [], 0
            pad = -filled % ALIGN  # each piece starts aligned, so the receiver can view it as its dtype
            if pad:
                parts.append(torch.zeros(pad, dtype=torch.uint8))
                filled += pad
            meta.offset = filled
            layout.append(meta)
            parts.append(chunk.detach().to("cpu").reshape(-1).clone())
            filled += meta.chunk_size
        payload = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8)
        await asyncio.to_thread(self._send_bucket, layout, payload, True)
        return {}

    async def receive_weights(self, global_steps: int | None = None) -> AsyncGenerator:
        async for name, tensor in merge_weight_chunks(self._chunks(), self.bucket_size):
            yield name, tensor

    async def _chunks(self):
        assert self.rank > 0, "actor rank 0 sends, it does not receive"
        is_last = False
        while not is_last:
            layout, is_last, payload = await asyncio.to_thread(self._receive_bucket)
            for meta in layout:
                yield meta, payload[meta.offset : meta.offset + meta.chunk_size]
