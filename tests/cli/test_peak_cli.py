"""``rlprof peak`` (issue 49): device, dtype and TFLOP/s, as text and JSON; what it cannot measure refused in one line.
How close the calibration is to a plain torch.matmul loop is a measurement, in bench/bench_peak.py."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from rlprof.cli import main as rlprof  # noqa: E402


def test_peak_says_device_dtype_and_tflops_and_refuses_what_it_cannot_measure(capsys):
    assert rlprof(["peak", "--device", "cpu", "--seconds", "0.05", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert (said["where"], said["dtype"], said["spec_tflops"]) == ("cpu", "fp32", None) and said["tflops"] > 0
    assert rlprof(["peak", "--device", "cpu", "--seconds", "0.05"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device ") and "(cpu), dtype fp32: " in out and "TFLOP/s (no spec in rlprof's table)" in out
    assert rlprof(["peak", "--device", "nowhere:3"]) == 1
    assert "rlprof peak: cannot measure nowhere:3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rlprof(["peak", "--dtype", "fp64"])
