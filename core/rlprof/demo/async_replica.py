"""A rollout replica of ``rlprof demo --async``: generates without pause, beside the trainer, between weight syncs.

Shaped like a replica of verl's fully async policy, with the demo's tiny policy in place of an
inference engine. Each replica is a Ray actor with its own :class:`~rlprof.Profiler` (role ``rollout``,
``replica_rank``) and one generating thread, which makes every Profiler call (a torch capture is stopped
on the thread that started it) and runs, until the run's last version:

* **admission**: one more group of responses may start when the staleness limit allows it
  (:class:`~rlprof.demo.samples.StalenessLimit`, asked through the :class:`~rlprof.demo.samples.SampleQueue`
  actor); while it does not, the thread is held: region ``rollout_held``;
* **generation**: one prompt's ``group_size`` responses, a decode step per ``prof.iteration()``, with the
  behaviour log-probs: region ``rollout_generate``; the finished group goes into the queue, tagged with
  the parameter version it was generated with;
* **weight sync** (:meth:`RolloutReplica.sync`, called by the trainer with version ``N``): the thread
  aborts what it generates at its next decode step (the group is generated again with the new
  weights) and pauses, region ``rollout_weight_pause``, from the abort to the end of the resume; inside
  it fetches the weights (the transport), loads them (``rollout_weight_load``) and resumes
  (``rollout_resume``: a forward pass with the new weights, as an engine warms up after a load). Then
  its step ``N`` ends and step ``N + 1`` begins: a replica's step ``N`` runs from the sync that ends the
  trainer's step ``N - 1`` to the one that ends step ``N`` (docs/analysis.md, "Async overlap").
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

HELD_POLL_S = 1.0
"""A held replica's wait on the queue ends at least this often (a weight sync ends it at once: :meth:`SampleQueue.interrupt`)."""
SYNC_WAIT_S = 120.0
"""The longest :meth:`RolloutReplica.sync` waits for the generating thread to finish a sync."""


class ReplicaStopped(RuntimeError):
    """The generating thread ended early (it raised, or the run was closed); the message says why."""


class RolloutReplica:
    """One rollout replica (a Ray actor): the tiny policy, a Profiler, a generating thread.

    :param config: the run's profiler configuration (parsed), as the trainer's workers get it.
    :param queue_handle: the :class:`~rlprof.demo.samples.SampleQueue` actor.
    :param last_step: the run's last version: the thread ends after that version's sync.
    """

    def __init__(self, config: Any, replica_rank: int, num_replicas: int, run_id: str, sizes: Any, queue_handle: Any,
                 last_step: int, seed: int = 0):
        import torch

        from rlprof.demo.grpo import TinyPolicy
        from rlprof.runtime.profiler import Profiler

        torch.set_num_threads(1)  # replicas and trainer ranks share few cores
        # torch.profiler's first start in a process imports torch._inductor (about 1 s here: its
        # prepare_trace asks hasattr(torch, "_inductor")); an inference engine has it imported long before
        # it generates (vLLM compiles with it), and so does this replica, before its first capture.
        import torch._inductor  # noqa: F401
        torch.manual_seed(seed)  # the trainer's initial weights (version 0)
        self.policy = TinyPolicy(sizes).requires_grad_(False)
        self.sizes = sizes
        self.replica_rank = replica_rank
        self.queue = queue_handle
        self.last_step = last_step
        self.version = 0
        """The parameter version loaded (set by the generating thread at each sync)."""
        self.sampler = torch.Generator().manual_seed(seed + 7919 * (replica_rank + 1))
        self.prompts = torch.Generator().manual_seed(seed + 104729 * (replica_rank + 1))
        self.profiler = Profiler(config, rank=replica_rank, world_size=num_replicas, roles=("rollout",),
                                 replica_rank=replica_rank, num_replicas=num_replicas, run_id=run_id)
        self.profiler.driven = True  # the demo's controller decides unplanned captures, not each replica
        self._requests: queue.Queue = queue.Queue()
        """Weight syncs the trainer asked for: ``(version, [weights ref], done event, answer dict)``."""
        self._closing = threading.Event()
        self._failed: BaseException | None = None
        self.generated = 0
        """Groups this replica put into the queue."""
        self.tokens: list[tuple[int, int]] = []
        """``(time_ns, tokens so far)`` at every decode step's end: the replica's generation rate (benches)."""
        self._thread = threading.Thread(target=self._run, name=f"rollout-replica-{replica_rank}", daemon=True)

    # ------------------------------------------------------------------ the actor's methods (Ray's thread)

    def ready(self) -> int:
        import os

        return os.getpid()

    def start(self) -> None:
        """Begin generating (version 0, step 1)."""
        self._thread.start()

    def sync(self, version: int, weights: list) -> dict[str, float]:
        """Load parameter version ``version`` (``weights``: a one-item list holding the state dict's object
        ref, so that the replica fetches it itself, inside its pause); returns when the replica generates
        again, with how long it paused and loaded (ms). :raises ReplicaStopped: the thread is gone."""
        done = threading.Event()
        answer: dict[str, float] = {}
        self._check()
        self._requests.put((version, weights, done, answer))
        self.queue.interrupt.remote(self.replica_rank, version)  # a held thread sees the request at once
        if not done.wait(SYNC_WAIT_S):
            self._check()
            raise ReplicaStopped(f"replica {self.replica_rank}: weight sync to version {version} not done in {SYNC_WAIT_S:.0f} s")
        self._check()
        return answer

    def close(self, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """End generation and finalize the replica's Profiler (on its generating thread); its artifact records."""
        self._closing.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self.profiler.finalized and not self._thread.is_alive():
            self.profiler.finalize(wait_for_analysis=False)  # the thread never started (a Ray actor: see ray_worker)
        self._check()
        return list(self.profiler.artifacts)

    def progress(self) -> dict[str, Any]:
        """What the replica generated: groups, and ``(time_ns, tokens)`` per decode step."""
        return {"groups": self.generated, "tokens": list(self.tokens)}

    def _check(self) -> None:
        if self._failed is not None:
            raise ReplicaStopped(f"replica {self.replica_rank}: its generating thread raised "
                                 f"{type(self._failed).__name__}: {self._failed}") from self._failed

    # ------------------------------------------------------------------ the generating thread

    def _run(self) -> None:
        prof = self.profiler
        try:
            prof.start_step(1)
            admitted = False
            while not self._closing.is_set():
                request = self._next_request()
                if request is not None:
                    self._sync(*request)
                    if self.version >= self.last_step:
                        break
                    continue
                if not admitted:
                    admitted = self._admit()
                    if not admitted:
                        continue  # a sync came, or the run ends
                group = self._generate()
                if group is not None:  # else aborted by a sync: generated again with the new weights
                    import ray

                    # in the queue before this replica can pause; the answer admits the next group, or not
                    admitted = ray.get(self.queue.put.remote(group, self.version))
                    self.generated += 1
        except BaseException as exc:  # told to the trainer by its next sync
            self._failed = exc
        finally:
            prof.step_boundary()
            prof.finalize(wait_for_analysis=False)  # a Ray actor: its last traces' analysis may outlive it

    def _next_request(self):
        try:
            return self._requests.get_nowait()
        except queue.Empty:
            return None

    def _admit(self) -> bool:
        """One group admitted by the staleness limit; while it is held, the region ``rollout_held``. False
        when a weight sync or the run's end came first."""
        import ray

        if ray.get(self.queue.admit.remote(self.replica_rank, self.version)):
            return True
        with self.profiler.role("rollout", "held"):
            while not self._closing.is_set() and self._requests.empty():
                if ray.get(self.queue.admit.remote(self.replica_rank, self.version, HELD_POLL_S)):
                    return True
        return False

    def _generate(self):
        """One prompt's group, or None when a weight sync aborted it."""
        import torch

        from rlprof.demo.samples import Group

        sizes, prof = self.sizes, self.profiler
        prompt = torch.randint(sizes.vocab, (sizes.prompt_len,), generator=self.prompts)
        with prof.role("rollout", "generate", module=self.policy), torch.no_grad():
            logits, state = self.policy(prompt.repeat(sizes.group_size, 1))
            logits = logits[:, -1]
            tokens, log_probs = [], []
            for _ in range(sizes.response_len):
                if not self._requests.empty():
                    return None  # abort: the sync pauses this replica now
                with prof.iteration():
                    dist = torch.log_softmax(logits, dim=-1)
                    token = torch.multinomial(dist.exp(), 1, generator=self.sampler)
                    tokens.append(token)
                    log_probs.append(dist.gather(-1, token))
                    logits, state = self.policy(token, state)
                    logits = logits[:, -1]
                self.tokens.append((time.time_ns(), (self.tokens[-1][1] if self.tokens else 0) + sizes.group_size))
        return Group(prompt, torch.cat(tokens, dim=1), torch.cat(log_probs, dim=1), self.version, self.replica_rank)

    def _sync(self, version: int, weights: list, done: threading.Event, answer: dict[str, float]) -> None:
        """Pause, fetch and load ``version``'s weights, resume; then this replica's step ``version`` ends."""
        import ray
        import torch

        prof = self.profiler
        began = time.perf_counter()
        with prof.role("rollout", "weight_pause"):
            state = ray.get(weights[0])  # the transport: from the trainer's object to this process
            loading = time.perf_counter()
            with prof.role("rollout", "weight_load"):
                self.policy.load_state_dict(state)
            answer["load_ms"] = (time.perf_counter() - loading) * 1e3
            with prof.role("rollout", "resume"), torch.no_grad():
                self.policy(torch.zeros(1, 1, dtype=torch.long))  # warm up on the new weights
        answer["pause_ms"] = (time.perf_counter() - began) * 1e3
        self.version = version
        done.set()  # the trainer goes on; this replica's capture of step `version` closes meanwhile
        prof.step_boundary()
        if version < self.last_step:
            prof.start_step(version + 1)
