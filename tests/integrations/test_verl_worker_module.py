"""The model the verl drop-in hands a region (:func:`rlprof.integrations.verl.models.worker_module`):
the module verl 0.9.1's workers hold for each role, as verl's own precision debugger finds it, and None
(never an exception) where nothing resolves. verl's ``tests/utils/test_precision_debugger_profile.py``
case (Megatron model chunks: the first callable chunk, with one warning) is re-expressed here."""

import logging
from types import SimpleNamespace

import pytest

from rlprof import notices
from rlprof.integrations.verl.models import worker_module


class Model:
    def forward(self):
        return None


def engine_of(module):
    return SimpleNamespace(engine=SimpleNamespace(module=module))


def test_each_role_reads_its_training_worker_and_a_training_worker_its_own_engine():
    actor, ref, critic = Model(), Model(), Model()
    hybrid = SimpleNamespace(actor=engine_of(actor), ref=engine_of(ref))  # verl's ActorRolloutRefWorker
    assert worker_module(hybrid, "actor") is actor and worker_module(hybrid, "ref") is ref
    assert worker_module(engine_of(critic), "critic") is critic  # the critic's own TrainingWorker
    assert worker_module(engine_of(critic), "reward") is critic


def test_megatron_chunks_give_the_first_callable_one_with_a_warning_once(caplog):
    notices.forget()
    first, second = Model(), Model()
    worker = SimpleNamespace(actor=engine_of([object(), first, second]))
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert worker_module(worker, "actor") is first
        assert worker_module(worker, "actor") is first
    said = [r.getMessage() for r in caplog.records if "model chunks" in r.getMessage()]
    assert len(said) == 1 and "holds 2 model chunks" in said[0]


@pytest.mark.parametrize("worker", [
    SimpleNamespace(),                                   # no engine at all (another verl, a custom worker)
    SimpleNamespace(actor=SimpleNamespace(engine=None)),  # not built yet
    SimpleNamespace(actor=engine_of(object())),           # nothing callable
    SimpleNamespace(actor=engine_of([object()])),         # no callable chunk
])
def test_nothing_resolves_to_none(worker):
    assert worker_module(worker, "actor") is None


def test_a_raising_attribute_is_none_not_an_error():
    class Worker:
        @property
        def actor(self):
            raise RuntimeError("not initialised")

    assert worker_module(Worker(), "actor") is None
    assert worker_module(SimpleNamespace(), "rollout") is None  # a role with no model holder: the worker's own engine, here none
