"""verl's batches hand rlprof their token counts: the analytic FLOPs of every step's actor, ref and critic regions.

Where: the drop-in's ``DistProfiler.annotate`` wrapper, around a worker method whose region is timed
(:mod:`rlprof.integrations.verl.dist_profiler`). verl 0.9.1's trainer hands each worker its share of the batch
as a ``TensorDict`` without padding (``left_right_2_no_padding``): ``input_ids`` is a nested tensor, one row per
sequence, so a rank's sequence lengths are its offsets' differences (a padded batch's ``attention_mask`` sums
say the same; a ``DataProto`` carries it in ``.batch``). An update runs its batch ``epochs`` times
(``ppo_epochs``, popped by the worker: read before the call).

Which regions: a stage ending in ``update`` trains (6N: forward and backward), ``compute_log_prob``,
``compute_ref_log_prob`` and ``compute_values`` run forward only (2N); the formula is the decoder's, from the
Hugging Face config of the model verl's worker holds for the role (:func:`rlprof.integrations.verl.models.worker_module`;
FSDP shards keep it), with causal attention over each sequence's length (:mod:`rlprof.model_flops`). Other
regions (``train_batch`` inside an update, a replica's generation) are not counted: their tokens are their
enclosing region's, or not in the worker's hands.

verl's own ``perf/mfu/*`` (the same model, its own formula, over its ``train_batch`` timer and its device table)
is kept beside rlprof's by :mod:`rlprof.integrations.verl.step_metrics`. Never raises into verl's worker.
"""

from __future__ import annotations

from typing import Any

FORWARD_STAGES = ("compute_log_prob", "compute_ref_log_prob", "compute_values")


def counted(stage: str | None) -> bool | None:
    """Whether ``stage``'s tokens are counted: True trains, False forward only, None not counted."""
    if not stage:
        return None
    if stage == "update" or stage.endswith("_update"):
        return True
    return False if stage in FORWARD_STAGES else None


def before(args: tuple, kwargs: dict) -> tuple[list[int], int] | None:
    """The sequence lengths of the batch a worker method was given (its first argument, or ``data=``) and how many
    times it runs over it (``epochs``), read before the method pops them; None when none is found."""
    data = kwargs.get("data", args[0] if args else None)
    try:
        lengths = _lengths(data)
    except Exception:  # another verl's batch: no figures, never an error in training
        return None
    if not lengths:
        return None
    epochs = _non_tensor(data, "epochs", 1)
    return lengths, int(epochs) if isinstance(epochs, int) and epochs > 0 else 1


def record(profiler: Any, worker: Any, region: Any, train: bool, batch: tuple[list[int], int]) -> None:
    """After the method: the region's tokens to ``profiler`` (the drop-in's :class:`rlprof.Profiler`)."""
    from rlprof.integrations.verl.models import worker_module

    lengths, epochs = batch
    stage = region.region[len(region.role) + 1:] if region.region.startswith(region.role + "_") else None
    profiler.record_tokens(region.role, stage, sum(lengths) * epochs, model=worker_module(worker, region.role),
                           train=train, sequences=lengths * epochs)


def _lengths(data: Any) -> list[int] | None:
    if data is None:
        return None
    batch = getattr(data, "batch", None)  # a DataProto: its TensorDict
    source = batch if batch is not None and not hasattr(data, "keys") else data
    keys = set(source.keys()) if hasattr(source, "keys") else set()
    if "input_ids" in keys:
        ids = source["input_ids"]
        if getattr(ids, "is_nested", False):
            return [int(n) for n in ids.offsets().diff().tolist()]
    if "attention_mask" in keys:
        return [int(n) for n in source["attention_mask"].sum(-1).tolist()]
    return None


def _non_tensor(data: Any, key: str, default: Any) -> Any:
    try:
        from verl.utils import tensordict_utils as tu

        return tu.get(data, key=key, default=default)
    except Exception:
        return default
