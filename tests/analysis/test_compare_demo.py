"""Issue 34's acceptance for ``rlprof compare`` on real runs: two identical ``rlprof demo`` runs compared
with ``--fail-above 10`` exit 0 and say which changes are inside the noise; a run with one region made
slower on purpose (its records scaled in a copy of the manifest) is flagged against the run it came from.

Six profiled steps each (step 1 left out as warm-up: 5 compared steps x 2 ranks = 10 samples a side).
The slowed copy is compared with its own original, not with the other run, and slowed 3x, not 2x: on
the shared 2-core development VM under load, other jobs slowed one whole run by 1.5x, and one run's
actor_update ranged over 24-112 ms from step to step, where 2x in 10 samples is honestly "inside the
noise". The 2x case is tested on recorded runs with fixed noise (test_compare.py), and by hand on two
real 7-step demo runs (docs/analysis.md)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlprof", *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def demo_run(base: Path, name: str) -> Path:
    proc = cli("demo", "--steps", "1,2,3,4,5,6", "--save-path", base / name, cwd=base)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [run] = [p for p in (base / name).iterdir() if p.is_dir()]
    return run


def slowed(run: Path, region: str, factor: float) -> None:
    """``region`` took ``factor`` times as long in every record of ``run``."""
    for manifest in (run / "manifest").glob("*.jsonl"):
        records = [json.loads(line) for line in manifest.read_text().splitlines()]
        for r in records:
            if r.get("type") == "region" and r.get("region") == region:
                r["duration_ms"] *= factor
        manifest.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_identical_demo_runs_are_inside_the_noise_and_a_slowed_region_is_flagged(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("rlprof_torch")
    a, b = demo_run(tmp_path, "a"), demo_run(tmp_path, "b")
    same = cli("compare", a, b, "--fail-above", "10")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "step 1 left out as warm-up, 5 compared" in same.stdout and "inside the noise" in same.stdout
    assert "too few samples" not in same.stdout
    copy = tmp_path / "slowed" / b.name
    shutil.copytree(b, copy)
    slowed(copy, "actor_update", 3.0)
    slower = cli("compare", b, copy, "--fail-above", "10", "--json")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert [c["region"] for c in json.loads(slower.stdout)["regressions"]] == ["actor_update"]
