"""What verl's V1 trainer stored of each sample's ``AgentLoopMetrics``, read from verl's own store for a test to compare.

verl 0.9.1's V1 trainer puts every sample's agent-loop output, its ``metrics`` among the fields, into its
TransferQueue, and drops them when the step is done (``tq.kv_clear`` after ``_compute_metrics``). Loaded in every verl
process of ``examples/verl-cpu/run.py`` through ``VERL_USE_EXTERNAL_MODULES`` (with this directory on ``PYTHONPATH``)
when ``RLPROF_TEST_STORED_METRICS`` names a file: in the trainer's process, before each step's ``_compute_metrics``,
it reads the step's ``metrics`` field from the TransferQueue, as verl stored it, and appends one JSON line
``{"step": N, "metrics": [{...}, ...]}`` to that file. Independent of rlprof (which reads the samples' metrics
where the agent loop made them): the test of issue 48's acceptance sets the two side by side.
"""

import functools
import json
import os

PATH = os.environ.get("RLPROF_TEST_STORED_METRICS")
MODULE = "verl.trainer.ppo.v1.trainer_base"


def _patch(module):
    trainer = module.PPOTrainer
    original = trainer._compute_metrics

    @functools.wraps(original)
    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        import transfer_queue as tq

        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["metrics"])
        stored = data["metrics"]
        stored = stored.tolist() if hasattr(stored, "tolist") else list(stored)
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        with open(PATH, "a") as handle:
            handle.write(json.dumps({"step": int(global_steps),
                                     "metrics": [dict(m) for m, pad in zip(stored, padding) if not pad]}) + "\n")
        return original(self, batch, metrics, timing_raw, global_steps, epoch)

    trainer._compute_metrics = _compute_metrics


if PATH:
    from rlprof.integrations.verl.on_import import when_imported

    when_imported(MODULE, _patch)
