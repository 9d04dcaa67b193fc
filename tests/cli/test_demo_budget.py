"""``rlprof demo`` with a capture budget below one capture's size: the first profiled step is captured,
the rest are skipped by the budget with a reason, the demo trains to the end, and ``rlprof report`` shows
it as explained (exit 0), with the bytes of the capture it kept."""

import json
import subprocess
import sys

import pytest
from tiers import heavy  # tests/tiers.py


@pytest.mark.slow
def test_demo_with_a_capture_budget_below_one_capture(tmp_path):
    heavy('an rlprof demo')
    pytest.importorskip("ray")
    pytest.importorskip("rlprof_torch")
    save = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "rlprof.cli", "demo", "--workers", "1", "--steps", "1,2,3",
                           "--train-steps", "4", "--save-path", str(save), "global_profiler.capture_budget_mb=0.0001"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(save), "--json"], capture_output=True, text=True)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    [run] = json.loads(report.stdout)["runs"]
    assert {c["step"] for c in run["captures"]} == {1} and all(c["bytes"] > 1000 for c in run["captures"])
    assert sorted({s for skip in run["budget_skipped"] for s in skip["steps"]}) == [2, 3]
    assert all("capture_budget_mb" in s["reason"] for s in run["budget_skipped"])
    text = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(save)], capture_output=True, text=True).stdout
    assert "budget skipped: rank 0 steps 2, 3" in text and "profiling cost" in text
