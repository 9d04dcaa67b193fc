"""Real ``rlprof demo`` runs shared by the analysis tests that read them (test_report_demo.py,
test_compare_demo.py): each named run is made once per test session, whichever test asks first, since a
demo takes 12-16 s on the 2-core VM and CI time is tight."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from demo_runs import cli  # tests/analysis/demo_runs.py
from tiers import heavy  # tests/tiers.py


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory) -> Callable[..., Path]:
    """``demo_run(name, *flags)``: the run directory of ``rlprof demo --save-path <tmp>/<name> *flags``, run
    (and checked to exit 0) the first time a test asks for ``name``, then shared; what it printed is in
    ``demo.out`` two levels up (beside the save path)."""
    runs: dict[str, Path] = {}

    def run(name: str, *flags: str) -> Path:
        if name not in runs:
            heavy("an rlprof demo")
            pytest.importorskip("ray")
            pytest.importorskip("rlprof_torch")
            base = tmp_path_factory.mktemp(f"demo-{name}")
            proc = cli("demo", *flags, "--save-path", base / name, cwd=base)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            (base / "demo.out").write_text(proc.stdout)  # what the demo printed, for tests of its lines
            [runs[name]] = [p for p in (base / name).iterdir() if p.is_dir()]
        return runs[name]

    return run
