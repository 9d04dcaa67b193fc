"""``run.py --mode``: verl 0.9.1's V1 trainer modes (``trainer.v1.trainer_mode``) on this CPU.

- ``sync`` (the default): rollout and training take turns on the trainer's resources; the weights go to the
  ``hf`` replica after every step.
- ``colocate_async``: the same resources, but generation of the next batch goes on between steps (partial
  rollout: a request cut by a step's weight sync resumes with the new weights), ``num_warmup_batches`` ahead.
- ``separate_async``: a standalone ``hf`` replica on its own (fake) GPU generates all the time; the trainer's own
  (hybrid) replica is lent to generation only with ``--switch`` (``hybrid_rollout.enable_switch``: while the
  trainer waits for samples, timed by verl as ``switch_wait``, ``switch_to_rollout`` and ``switch_to_trainer``).
  Weights reach the standalone replica through the checkpoint engine, over gloo (verl's ``nccl`` needs CUDA),
  every ``parameter_sync_step`` (1 here: ``train_batch_size`` = ``parameter_sync_step`` ×
  ``ppo_mini_batch_size``, verl asserts it).
"""

from __future__ import annotations

MODES = ("sync", "colocate_async", "separate_async")

CHECKPOINT_ENGINE = [
    "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=verl_cpu_checkpoint_engine",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=1",
]
"""Weights through verl's checkpoint engine, over gloo (the fully async example's, ``fully_async.py``)."""


def overrides(sync: list[str], mode: str, switch: bool = False) -> list[str]:
    """The example's overrides (``run.overrides``, V1 sync) for ``mode``; ``switch``: separate_async lends the
    trainer's replica to generation."""
    if mode not in MODES:
        raise ValueError(f"--mode {mode!r}: one of {', '.join(MODES)}")
    if switch and mode != "separate_async":
        raise ValueError("--switch (trainer.v1.separate_async.hybrid_rollout.enable_switch) needs --mode separate_async")
    kept = [o for o in sync if not o.startswith(("trainer.v1.trainer_mode=", "+ray_kwargs.ray_init.num_gpus="))]
    out = kept + [f"trainer.v1.trainer_mode={mode}"]
    if mode == "sync":
        return out + ["+ray_kwargs.ray_init.num_gpus=1"]
    if mode == "colocate_async":
        return out + ["+ray_kwargs.ray_init.num_gpus=1", "trainer.v1.colocate_async.num_warmup_batches=1"]
    return out + CHECKPOINT_ENGINE + [
        # a standalone replica on a fake GPU of its own (two in Ray's books: the trainer's and the rollout's)
        "actor_rollout_ref.rollout.nnodes=1",
        "actor_rollout_ref.rollout.n_gpus_per_node=1",
        "+ray_kwargs.ray_init.num_gpus=2",
        "trainer.v1.separate_async.num_warmup_batches=1",
        "trainer.v1.separate_async.parameter_sync_step=1",
        f"trainer.v1.separate_async.hybrid_rollout.enable_switch={str(switch).lower()}",
    ]
