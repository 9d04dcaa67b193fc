"""The model a verl worker runs for a role: what the drop-in hands a region as its ``module``.

verl 0.9.1's workers (``verl/workers/engine_workers.py``) hold each role's model in an engine:

* ``ActorRolloutRefWorker`` (save_file_prefix ``actor_rollout_ref``...) keeps a ``TrainingWorker`` per
  trained role, ``self.actor`` and ``self.ref``; each holds its model as ``.engine.module``;
* a ``TrainingWorker`` of its own (the critic's ``value_model``, the reward model's) holds it as
  ``self.engine.module``.

So a region of role R is given ``worker.<R's holder>.engine.module`` when the worker has that holder,
else ``worker.engine.module`` (the worker is R's own TrainingWorker). ``engine.module`` is an
``nn.Module`` for the FSDP, VeOmni and automodel engines and a list of model chunks for Megatron
(torchtitan's ``model_parts``, a list too): the first chunk with a callable ``forward`` is the model,
with a warning once when there are several (verl's own precision debugger binds the first too).

Asked only when a selected backend reads the model (``reads_module``: rlprof-msprobe's), on the
region's entry: never on the idle path. Nothing here raises: a worker without the attribute (another
verl version, a custom worker) gives None, and the backend then says why it skipped the region.
"""

from __future__ import annotations

import logging
from typing import Any

from rlprof.notices import say_once

log = logging.getLogger("rlprof")

HOLDERS = {"actor": "actor", "ref": "ref", "critic": "critic", "reward": "reward_model"}
"""Role -> the attribute of verl's ``ActorRolloutRefWorker`` (or a worker shaped like it) holding
that role's ``TrainingWorker``; a worker without it is the role's own TrainingWorker."""


def worker_module(worker: Any, role: str) -> Any:
    """The model ``worker`` runs for ``role`` (see the module doc), or None when none resolves."""
    try:
        holder = getattr(worker, HOLDERS[role], None) if role in HOLDERS else None
        engine = getattr(worker if holder is None else holder, "engine", None)
        module = getattr(engine, "module", None)
    except Exception:  # a property of verl's that raises: no model, never an error in training
        return None
    if isinstance(module, (list, tuple)):
        chunks = [m for m in module if _runs(m)]
        if len(chunks) > 1:
            say_once(f"verl: model chunks of {role}", log,
                     "rlprof: %s's engine holds %d model chunks; regions of %s name the first as their model "
                     "(as verl's precision debugger binds it)", role, len(chunks), role)
        return chunks[0] if chunks else None
    return module if _runs(module) else None


def _runs(model: Any) -> bool:
    return model is not None and callable(getattr(model, "forward", None))
