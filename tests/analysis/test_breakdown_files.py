"""``rlprof breakdown`` and ``rlprof report`` on real torch.profiler runs: where the rows are cached (never beside
a trace: the folders holding traces keep only what the backends wrote), and what a folder walk finds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlprof.analysis import breakdown_files
from rlprof.layout import CORE_DIRS, ROWS_SUFFIX, rows_path

pytest.importorskip("rlprof_torch")


def trace_folders(run_dir: Path) -> dict[str, list[str]]:
    """Every folder of a run outside rlprof's own (manifest, budget, breakdown), with the names it holds."""
    folders = {}
    for folder in sorted(p for p in run_dir.rglob("*") if p.is_dir()):
        inside = folder.relative_to(run_dir)
        if inside.parts[0] not in CORE_DIRS:
            folders[str(inside)] = sorted(p.name for p in folder.iterdir())
    return folders


@pytest.fixture
def torch_run(rlprof_run):
    """A real run: the torch backend through a real Profiler, two profiled steps of actor and ref regions,
    each a matrix product."""
    import torch

    x = torch.randn(64, 64)
    run = rlprof_run("torch", steps=(1, 2), roles=("actor", "ref"), work=lambda: (x @ x).sum())
    assert len(list(run.run_dir.glob("step*/*/torch/*.pt.trace.json.gz"))) == 2
    return run


def test_report_and_breakdown_leave_the_folders_holding_traces_as_the_backends_wrote_them(torch_run, rlprof_cli,
                                                                                          monkeypatch):
    run_dir = torch_run.run_dir
    written = trace_folders(run_dir)
    assert rlprof_cli("report", torch_run.save_path, "--no-details").returncode == 0
    done = rlprof_cli("breakdown", run_dir, "--json")
    assert done.returncode == 0, done.stderr
    assert {Path(r["path"]).name for r in json.loads(done.stdout)["rows"]} == {"rank0.pt.trace.json.gz"}
    assert trace_folders(run_dir) == written  # nothing beside any trace
    kept = sorted(p.name for p in (run_dir / "breakdown").iterdir())
    assert len(kept) == 2 and all(name.endswith(ROWS_SUFFIX) for name in kept)  # the run's own folder holds the rows
    assert {rows_path(str(p)).name for p in run_dir.glob("step*/*/torch/*.pt.trace.json.gz")} == set(kept)

    monkeypatch.setattr(breakdown_files, "_load", lambda target: pytest.fail("a trace was read again"))
    again = rlprof_cli("breakdown", run_dir, "--json")
    assert json.loads(again.stdout)["rows"] == json.loads(done.stdout)["rows"]


def test_a_loose_trace_gets_nothing_beside_it_and_its_rows_go_to_the_cache_folder(torch_run, tmp_path, rlprof_cli,
                                                                                  monkeypatch):
    """A trace in no run (a file a user brought): its rows are kept in RLPROF_CACHE_DIR, or nowhere when it is empty."""
    trace = next(torch_run.run_dir.glob("step1/*/torch/*.pt.trace.json.gz"))
    loose = tmp_path / "brought" / trace.name
    loose.parent.mkdir()
    loose.write_bytes(trace.read_bytes())
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLPROF_CACHE_DIR", str(cache))
    assert rlprof_cli("breakdown", loose).returncode == 0
    assert sorted(p.name for p in loose.parent.iterdir()) == [trace.name]
    assert rows_path(str(loose)).parent == cache and [p.name for p in cache.iterdir()] == [rows_path(str(loose)).name]

    monkeypatch.setenv("RLPROF_CACHE_DIR", "")
    assert rows_path(str(loose)) is None
    other = loose.with_name("copy.pt.trace.json.gz")
    other.write_bytes(loose.read_bytes())
    assert rlprof_cli("breakdown", other).returncode == 0
    assert sorted(p.name for p in loose.parent.iterdir()) == sorted([trace.name, other.name])
    assert len(list(cache.iterdir())) == 1


def test_a_link_planted_as_the_runs_breakdown_folder_is_not_followed(torch_run, tmp_path, rlprof_cli):
    """save_path is often shared: a link where rlprof keeps a run's rows must not lead its writes elsewhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (torch_run.run_dir / "breakdown").symlink_to(elsewhere)
    done = rlprof_cli("breakdown", torch_run.run_dir / "step1", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["rows"]
    assert list(elsewhere.iterdir()) == []
