"""The backend contract every rlprof backend keeps (rlprof.testing.conformance), run on
``precision_debugger`` with real msprobe dumping a small model in every region, ``blocked_signals``
included; and once without a model, where every region says why it dumps nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("msprobe")

from msprobe_workload import run, shared_config, tiny_model  # noqa: E402
from rlprof.testing.conformance import BackendConformance, check_backend  # noqa: E402

MODEL = tiny_model()
CONFIG = shared_config()


def forward_backward() -> None:
    run(MODEL)


class TestPrecisionDebugger(BackendConformance):
    backend = "precision_debugger"
    tool_config = {"config_path": str(CONFIG)}
    module = MODEL
    work = forward_backward


def test_contract_without_a_model_every_region_says_why():
    report = check_backend("precision_debugger", tool_config={"config_path": str(CONFIG)},
                           scenarios=["end_to_end", "discrete", "blocked_signals"])
    assert report.ok
