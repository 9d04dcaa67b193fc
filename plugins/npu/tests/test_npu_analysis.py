"""``analysis``: parsed in the run (``tensorboard_trace_handler(..., analyse_flag=True)``) or later by
``rlprof npu-analyse PATH``, which finds every unparsed capture through the manifest and calls
``torch_npu.profiler.profiler.analyse(profiler_path=<parent of the *_ascend_pt directory>)``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from npu_tiny_training import npu_config, train

from rlprof.cli import main as rlprof_main

PARSED = "ASCEND_PROFILER_OUTPUT"


def ascend_pt_dirs(prof) -> list[Path]:
    return [prof.run.run_dir / a["path"] for a in prof.artifacts if a["kind"] == "ascend_pt"]


@pytest.mark.parametrize("mode", ["e2e", "discrete"])
def test_analysis_true_parses_every_capture_when_it_closes(torch_npu_standin, tmp_path, mode):
    prof = train(npu_config(tmp_path, npu={"analysis": True}, mode=mode))
    handlers = torch_npu_standin.named("tensorboard_trace_handler")
    assert handlers and all(h.args["analyse_flag"] is True for h in handlers)
    dirs = ascend_pt_dirs(prof)
    assert len(dirs) == len(handlers) and all((d / PARSED).is_dir() for d in dirs)
    assert all(a["analysis"] is True for a in prof.artifacts)
    assert rlprof_main(["npu-analyse", str(tmp_path)]) == 0  # nothing left to parse
    assert not torch_npu_standin.named("analyse")


def test_npu_analyse_parses_the_captures_collected_without_analysis(torch_npu_standin, tmp_path, capsys):
    prof = train(npu_config(tmp_path, npu={"analysis": False}, mode="discrete"))
    dirs = ascend_pt_dirs(prof)
    assert len(dirs) == 4 and not any((d / PARSED).exists() for d in dirs)

    assert rlprof_main(["npu-analyse", "--list", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(d) for d in sorted(dirs)]
    assert not torch_npu_standin.named("analyse")

    assert rlprof_main(["npu-analyse", str(tmp_path)]) == 0
    assert sorted(c.args["profiler_path"] for c in torch_npu_standin.named("analyse")) == sorted(str(d.parent) for d in dirs)
    assert all((d / PARSED).is_dir() for d in dirs)
    assert "parsed 4 of 4 capture(s)" in capsys.readouterr().out

    torch_npu_standin.reset()
    assert rlprof_main(["npu-analyse", str(prof.run.run_dir), "--all"]) == 0  # a run directory works too
    assert len(torch_npu_standin.named("analyse")) == 4


def test_npu_analyse_without_torch_npu_says_so_and_exits_1(torch_npu_standin, tmp_path, monkeypatch, capsys):
    train(npu_config(tmp_path, npu={"analysis": False}))
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import torch_npu now raises ImportError
    assert rlprof_main(["npu-analyse", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "torch_npu cannot be imported" in err and "2 capture(s) wait to be parsed" in err


def test_npu_analyse_on_a_path_without_a_run_exits_2(tmp_path, capsys):
    assert rlprof_main(["npu-analyse", str(tmp_path)]) == 2
    assert "holds no rlprof run" in capsys.readouterr().err
