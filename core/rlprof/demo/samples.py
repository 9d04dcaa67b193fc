"""The sample queue of ``rlprof demo --async``: bounded, between the rollout replicas and the trainer.

verl's fully async policy puts a message queue between its rollouter and its trainer; this is the
demo's, a Ray actor (:class:`SampleQueue`) holding :class:`Group` items (one prompt's group of
responses, the parameter version they were generated with). Two rules hold generation back, both in
:class:`StalenessLimit` (pure, tested apart from Ray):

* **staleness**: a group the replicas generate with version ``w`` will be trained on in trainer step
  ``N`` at most ``w + 1 + staleness`` (the trainer of step ``N`` holds version ``N - 1``, so the
  group is then at most ``staleness`` versions behind). Groups are counted as they are admitted
  (reserved): admitting one more is allowed while ``admitted + 1 <= (w + 1 + staleness) * batch``,
  and never past what the run's last step will take. With ``staleness`` 0 the replicas can generate a
  step's samples only after the weights it trains on arrived: no overlap; with 1 (the demo's
  default) they generate step ``N + 1``'s samples while the trainer trains step ``N``.
* **bounded queue**: at most ``capacity`` groups admitted and not yet taken by the trainer.

Why the bound holds although replicas put in any order: a weight sync aborts what every replica is
generating (the group is generated again with the new weights), and a replica puts a finished group
before it pauses, so every group of version ``w`` is in the queue before sync ``w + 1`` ends. Groups
are trained on in the order they were put; at most ``(w + 1 + staleness) * batch`` were admitted with
versions up to ``w``, so a version-``w`` group is among the first that many: trained in step
``w + 1 + staleness`` at the latest.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Group:
    """One prompt and its ``group_size`` responses, as a replica generated them."""

    prompt: Any
    """Tensor ``(prompt_len,)`` of policy tokens."""
    responses: Any
    """Tensor ``(group_size, response_len)``."""
    log_probs: Any
    """Tensor ``(group_size, response_len)``: the behaviour policy's log-probs of the responses (GRPO's "old")."""
    version: int
    """The parameter version the replica generated it with (0: the initial weights)."""
    replica_rank: int


@dataclass(frozen=True)
class StalenessLimit:
    """When a replica holding parameter version ``w`` may start generating one more group (pure)."""

    batch: int
    """Groups the trainer takes per step (every rank's share together)."""
    staleness: int
    """How many versions behind the trainer's a trained group may be (verl's ``staleness_threshold``)."""
    capacity: int
    """Groups admitted and not taken yet, at most (the queue's bound)."""
    last_step: int
    """The run's last trainer step: no group is generated that no step will take."""

    def __post_init__(self) -> None:
        if self.batch < 1 or self.staleness < 0 or self.capacity < 1 or self.last_step < 1:
            raise ValueError(f"batch {self.batch}, staleness {self.staleness}, capacity {self.capacity}, last step "
                             f"{self.last_step}: allowed batch >= 1, staleness >= 0, capacity >= 1, last step >= 1")

    def held_by(self, version: int, admitted: int, taken: int) -> str | None:
        """Why one more group may not start now (``"staleness"``, ``"queue full"``, ``"run complete"``), or
        None when it may. ``admitted``: groups admitted so far; ``taken``: groups the trainer took."""
        if admitted + 1 > self.last_step * self.batch:
            return "run complete"
        if admitted + 1 > (version + 1 + self.staleness) * self.batch:
            return "staleness"
        if admitted - taken + 1 > self.capacity:
            return "queue full"
        return None


class SampleQueue:
    """The queue as a Ray actor (its methods are coroutines: a held replica and a waiting trainer rank
    each wait on the actor's event loop without holding a thread).

    :param limit: the rules (:class:`StalenessLimit`).
    :param ranks: trainer ranks; each takes ``limit.batch // ranks`` groups of every step.
    """

    def __init__(self, limit: StalenessLimit, ranks: int):
        self.limit = limit
        self.ranks = ranks
        self.admitted = 0
        self.taken = 0
        self._queue: list[Group] = []
        self._steps: dict[int, list[list[Group]]] = {}
        """step -> each rank's share still to be taken (the step's batch, split when its first rank asks)."""
        self._changed: asyncio.Condition | None = None
        self._closed = False
        self._syncing: dict[int, int] = {}
        """replica rank -> the version a weight sync is bringing it (:meth:`interrupt`)."""

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:  # made on the actor's own event loop, at its first call
            self._changed = asyncio.Condition()
        return self._changed

    async def admit(self, replica_rank: int, version: int, wait_s: float = 0.0) -> bool:
        """Admit one group the replica will generate with ``version`` now, or within ``wait_s`` seconds;
        False when the limit still holds it then, or a weight sync to a newer version is on its way to it
        (:meth:`interrupt`): the replica syncs, then asks again."""
        changed = self._condition()

        def decided() -> bool:
            return (self._closed or self._syncing.get(replica_rank, -1) > version
                    or self.limit.held_by(version, self.admitted, self.taken) is None)

        async with changed:
            try:
                await asyncio.wait_for(changed.wait_for(decided), timeout=wait_s if wait_s > 0 else 1e-9)
            except asyncio.TimeoutError:
                return False
            if self._closed or self._syncing.get(replica_rank, -1) > version:
                return False
            self.admitted += 1
            return True

    async def interrupt(self, replica_rank: int, version: int) -> None:
        """A weight sync to ``version`` is on its way to the replica: a wait of its :meth:`admit` ends now."""
        changed = self._condition()
        async with changed:
            self._syncing[replica_rank] = max(version, self._syncing.get(replica_rank, -1))
            changed.notify_all()

    async def put(self, group: Group, next_version: int | None = None) -> bool:
        """Put ``group`` into the queue; with ``next_version``, also admit the replica's next group as
        :meth:`admit` does without waiting (one call instead of two: what the replica does next)."""
        changed = self._condition()
        async with changed:
            self._queue.append(group)
            changed.notify_all()
        if next_version is None:
            return False
        return await self.admit(group.replica_rank, next_version)

    async def take(self, step: int, rank: int, timeout_s: float) -> list[Group]:
        """Rank ``rank``'s share of step ``step``'s batch: the first ``batch`` groups put and not taken,
        waited for (at most ``timeout_s``). :raises TimeoutError: they did not come in time."""
        changed = self._condition()
        async with changed:
            await asyncio.wait_for(changed.wait_for(
                lambda: step in self._steps or len(self._queue) >= self.limit.batch or self._closed), timeout=timeout_s)
            if step not in self._steps:  # this rank came first: the step's batch is split now
                if self._closed:
                    raise TimeoutError("the sample queue was closed")
                batch, self._queue = self._queue[:self.limit.batch], self._queue[self.limit.batch:]
                share = self.limit.batch // self.ranks
                self._steps[step] = [batch[r * share:(r + 1) * share] for r in range(self.ranks)]
                self.taken += self.limit.batch
                changed.notify_all()  # room in the queue: held replicas may go on
            shares = self._steps[step]
            mine, shares[rank] = shares[rank], []
            if not any(shares):
                del self._steps[step]
            return mine

    async def close(self) -> None:
        """Wake everyone waiting: the run is over."""
        changed = self._condition()
        async with changed:
            self._closed = True
            changed.notify_all()
