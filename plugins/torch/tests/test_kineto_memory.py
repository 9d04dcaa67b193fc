"""Issue 42: where a capture recorded memory (``contents: [memory]``, torch's ``profile_memory``), each region's
row holds the most memory allocated during it; where it did not, the figure is unknown (null), never 0."""

from __future__ import annotations

import json
import subprocess
import sys

from rlprof.analysis.breakdown import split
from rlprof.analysis.breakdown_files import breakdown
from rlprof_torch.kineto_reader import read_trace

MB = 1_000_000


def record(path, profile_memory: bool):
    """Two regions recorded by torch.profiler: ``grow`` allocates 4 MB it keeps and 8 MB it frees; ``after``
    allocates nothing while the 4 MB stay."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], profile_memory=profile_memory) as prof:
        with record_function("grow"):
            kept = torch.empty(4 * MB, dtype=torch.uint8)
            freed = torch.empty(8 * MB, dtype=torch.uint8)
            del freed
        with record_function("after"):
            kept.add_(1)
    prof.export_chrome_trace(str(path))
    return path


def test_a_regions_peak_is_what_was_allocated_at_its_start_and_inside_it(tmp_path):
    rows = {row.region: row for row in split(read_trace(str(record(tmp_path / "mem.json", True))))}
    grow, after = rows["grow"].peak_allocated_bytes, rows["after"].peak_allocated_bytes
    assert abs(grow - after - 8 * MB) < 1024  # the freed tensor lived beside the kept one inside `grow` only
    assert 4 * MB <= after < 4 * MB + 1024  # `after` allocated nothing: what was allocated as it began
    assert rows["(trace)"].peak_allocated_bytes == grow


def test_without_memory_in_the_capture_the_peak_is_unknown(tmp_path):
    rows = split(read_trace(str(record(tmp_path / "plain.json", False))))
    assert rows and all(row.peak_allocated_bytes is None for row in rows)


def test_a_run_with_contents_memory_shows_each_regions_peak_in_breakdown(run_training, tmp_path):
    run = run_training(torch_config={"contents": ["cpu", "memory"]})
    rows, errors = breakdown(run.files(), workers=1)
    assert errors == []
    regions = [row for row in rows if row.region.startswith("actor")]
    assert regions and all(row.peak_allocated_bytes > 0 for row in regions)
    shown = subprocess.run([sys.executable, "-m", "rlprof.cli", "breakdown", *map(str, run.files())],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert "peak allocated" in shown.stdout.splitlines()[0] + shown.stdout, shown.stdout[:2000]
    as_json = subprocess.run([sys.executable, "-m", "rlprof.cli", "breakdown", "--json", *map(str, run.files())],
                             capture_output=True, text=True, timeout=300)
    listed = [row for row in json.loads(as_json.stdout)["rows"] if row["region"].startswith("actor")]
    assert listed and all(row["peak_allocated_bytes"] > 0 for row in listed)
