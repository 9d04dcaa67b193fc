"""``rlprof breakdown`` and ``rlprof report`` on real torch.profiler runs: where the rows are cached (never beside
a trace: the folders holding traces keep only what the backends wrote), and what a folder walk finds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlprof.analysis import breakdown_files, rows_cache
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
    shutil.rmtree(torch_run.run_dir / "breakdown", ignore_errors=True)  # the rows the run's own analysis kept
    (torch_run.run_dir / "breakdown").symlink_to(elsewhere)
    done = rlprof_cli("breakdown", torch_run.run_dir / "step1", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["rows"]
    assert list(elsewhere.iterdir()) == []


ROOT = Path(__file__).resolve().parents[2]


def plugin_helper(plugin: str, name: str):
    """A stand-in writer from a plugin's tests (plugins/<plugin>/tests/<name>.py), loaded by path."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"rlprof_{plugin}_tests_{name}", ROOT / "plugins" / plugin / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def record_kineto(path: Path) -> Path:
    """A real torch.profiler trace (CPU): two steps, each a matrix product inside ``actor_update``."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(128, 128)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            with record_function("actor_update"):
                (x @ x).sum()
            prof.step()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture
def every_kind(tmp_path) -> dict[str, Path]:
    """A folder a user might hand over: a real Kineto trace, an nsys SQLite export with CUDA tables and a
    torch_npu capture (stand-ins written in their documented formats: no GPU or NPU here), a truncated
    trace and a file that is no trace."""
    folder = tmp_path / "brought"
    standin = plugin_helper("nsys", "nsys_export_standin")
    export = standin.Export(ranges=[("step3", 0, 20, "rlprof"), ("actor_update", 0, 10, "rlprof")],
                            kernels=[("gemm", 1, 5, 0.5), ("ncclKernel_AllReduce_RING_LL_Sum_float", 6, 9, 0.7)],
                            copies=[("memcpy", 2, 3, 0.8)])
    npu = plugin_helper("npu", "trace_view_standin").trace_view(folder / "npu", 2)
    broken = folder / "kineto" / "broken.pt.trace.json"
    files = {"kineto": record_kineto(folder / "kineto" / "rank0.pt.trace.json"),
             "nsys": standin.write_export(folder / "nsys" / "rank1.sqlite", export), "npu": npu,
             "npu_rank_file": npu.parents[1] / "profiler_info_2.json", "broken": broken, "notes": folder / "notes.txt"}
    broken.write_text(files["kineto"].read_text()[:500])
    files["notes"].write_text("what I ran\n")
    return files


def test_a_folder_of_every_backends_traces_gives_rows_and_one_line_per_file_it_cannot_split(every_kind, rlprof_cli):
    """Seen before: the walk looked for Chrome trace names only, so the nsys export and everything else
    it did not know were passed over without a word."""
    folder = every_kind["notes"].parent
    done = rlprof_cli("breakdown", folder, "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    devices = {(Path(r["path"]).name, r["device"]) for r in out["rows"] if r["region"] == "actor_update"}
    assert devices == {("rank0.pt.trace.json", "cpu"), ("rank1.sqlite", "cuda"), ("trace_view.json", "npu")}
    assert [e["path"] for e in out["errors"]] == [str(every_kind["broken"])]
    assert {s["path"]: s["reason"] for s in out["skipped"]} == {
        str(every_kind["npu_rank_file"]): "npu writes it beside its traces (profiler_info*.json): not a trace",
        str(every_kind["notes"]): "no installed reader reads this kind of file"}

    text = rlprof_cli("breakdown", folder)
    lines = [line for line in text.stderr.splitlines() if not line.startswith("rlprof breakdown: the installed readers")]
    for name in ("broken", "npu_rank_file", "notes"):  # one line each, naming the file
        assert len([line for line in lines if str(every_kind[name]) in line]) == 1, (name, lines)
    assert len(lines) == 3, lines
    for name in ("kineto", "nsys", "npu"):
        assert f"{every_kind[name]} (rank " in text.stdout


def test_a_real_nsys_export_in_the_folder_costs_its_line_and_the_others_still_split(every_kind, rlprof_cli):
    """nsys 2022.4 records here without a GPU: its export has NVTX ranges and no device events, one line."""
    import shutil
    import subprocess

    nsys = shutil.which("nsys")
    if nsys is None:
        pytest.skip("nsys (Nsight Systems CLI) is not on PATH: run scripts/install-nsys.sh as root")
    folder = every_kind["notes"].parent
    report = plugin_helper("nsys", "nsys_export_standin").record_cpu_report(folder.parent, nsys)
    real = folder / "nsys" / "cpu.sqlite"
    subprocess.run([nsys, "export", "--type", "sqlite", "-o", str(real), str(report)], check=True, capture_output=True,
                   timeout=120)
    done = rlprof_cli("breakdown", folder, "--json")
    out = json.loads(done.stdout)
    assert done.returncode == 0 and {Path(r["path"]).name for r in out["rows"]} == {
        "rank0.pt.trace.json", "rank1.sqlite", "trace_view.json"}
    reasons = {e["path"]: e["reason"] for e in out["errors"]}
    assert reasons[str(real)].startswith("NotReadable: no device events") and len(reasons) == 2
    assert sorted(p.name for p in real.parent.iterdir()) == ["cpu.sqlite", "rank1.sqlite"]  # nothing written beside them


def test_rows_kept_by_the_previous_version_are_made_again(torch_run, rlprof_cli, monkeypatch):
    """Version 1 held the exposed copies as memory_ms and had no exposed_memory_ms: its rows are never shown."""
    trace = next(torch_run.run_dir.glob("step1/*/torch/*.pt.trace.json.gz"))
    assert rlprof_cli("breakdown", trace).returncode == 0
    kept = rows_path(str(trace))
    document = json.loads(kept.read_text())
    document["key"]["version"] = 1
    for row in document["rows"]:
        row.pop("exposed_memory_ms")
        row["memory_ms"] = 123.0
    kept.write_text(json.dumps(document))
    read = []
    real_load = breakdown_files._load
    monkeypatch.setattr(breakdown_files, "_load", lambda target: read.append(target) or real_load(target))
    out = json.loads(rlprof_cli("breakdown", trace, "--json", "--workers", "1").stdout)
    assert read and all(row["memory_ms"] == 0 and "exposed_memory_ms" in row for row in out["rows"])
    assert json.loads(kept.read_text())["key"]["version"] == rows_cache.CACHE_VERSION
