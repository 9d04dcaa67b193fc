"""The backend contract every rlprof backend keeps (rlprof.testing.conformance), run on ``npu``
twice: capturing (the stand-in torch_npu installed) and without torch_npu (this machine)."""

from __future__ import annotations

import sys

import pytest

conformance = pytest.importorskip("rlprof.testing.conformance")


def test_contract_while_capturing(torch_npu_standin):
    conformance.check_backend("npu").raise_if_failed()
    assert torch_npu_standin.named("profile.stop")  # it did capture


def test_contract_without_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import torch_npu raises ImportError
    conformance.check_backend("npu").raise_if_failed()
