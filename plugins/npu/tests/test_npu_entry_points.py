"""The backend and the command are found through their entry points, as users get them, and
loading them imports neither torch nor torch_npu."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlprof.cli import main as rlprof_main
from rlprof.installed import discover, distribution_of
from rlprof.runtime.registry import implemented_hooks, load_backend


def test_backend_entry_point():
    ep = discover()["npu"]
    assert ep.value == "rlprof_npu.backend:NpuBackend"
    assert distribution_of(ep)[0] == "rlprof-npu"
    assert set(implemented_hooks(load_backend("npu"))) == {
        "validate_tool_config", "check_environment", "start_step", "start_role", "stop_role", "step_boundary", "finalize",
        "cli_commands", "trace_reader"}


def test_npu_analyse_is_an_rlprof_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        rlprof_main(["npu-analyse", "--help"])
    assert exit_info.value.code == 0
    assert "usage: rlprof npu-analyse" in capsys.readouterr().out


def test_loading_the_plugin_imports_neither_torch_nor_torch_npu():
    code = ("import sys, rlprof_npu.backend, rlprof_npu.analyse; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_npu')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
