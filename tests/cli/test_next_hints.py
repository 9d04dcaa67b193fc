"""Every "next:" command rlprof prints runs when pasted into the shell that started rlprof: it starts with
rlprof the way the user typed it (``.venv/bin/rlprof``, ``python -m rlprof``), and with bare ``rlprof``
only when that is on PATH and the same program (:mod:`rlprof.invocation`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof.cli import main
from rlprof.invocation import rlprof_command
from rlprof.testing.generated_run import generate_run


def next_lines(capsys) -> list[str]:
    out = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(out) if line.startswith("next: "))
    return [line.removeprefix("next: ").strip() for line in out[start:start + 2]]


@pytest.fixture
def run(tmp_path) -> Path:
    return generate_run(tmp_path / "save", ranks=2, steps=(1, 2))


@pytest.fixture
def bin_dir(tmp_path) -> Path:
    """A venv-like bin directory holding an ``rlprof`` script, and PATH without it."""
    script = tmp_path / "venv" / "bin" / "rlprof"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return script.parent


def test_started_as_a_relative_path_the_hints_use_that_path(run, bin_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the README's shell: the venv is not on PATH
    monkeypatch.setattr(sys, "argv", ["venv/bin/rlprof", "report", str(run)])
    assert main(["report", str(run)]) == 0
    timeline, html = next_lines(capsys)
    assert timeline.startswith("venv/bin/rlprof timeline save/") and html.startswith("venv/bin/rlprof report save/")
    # pasted into that shell, the command runs (here: the stand-in script, which exits 0)
    assert subprocess.run(timeline.split("   (")[0], shell=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}).returncode == 0


def test_bare_rlprof_only_when_path_finds_the_same_program(bin_dir, tmp_path, monkeypatch):
    script = str(bin_dir / "rlprof")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    assert rlprof_command(script) == "rlprof"  # what a shell with the venv activated passes as argv[0]
    other = tmp_path / "other" / "rlprof"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    assert rlprof_command(str(other)) == str(other)  # another rlprof on PATH: keep the path
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert rlprof_command(script) == script
    assert rlprof_command("/x y/bin/rlprof") == "'/x y/bin/rlprof'"  # quoted for the shell


def test_started_with_python_m(monkeypatch):
    monkeypatch.setenv("PATH", "/nowhere")
    for argv0, module in (("/site/rlprof/__main__.py", "rlprof"), ("/site/rlprof/cli/__main__.py", "rlprof.cli")):
        assert rlprof_command(argv0) == f"{sys.executable} -m {module}"


def test_called_from_python_without_rlprof_on_path_hints_python_m(monkeypatch):
    monkeypatch.setenv("PATH", "/nowhere")
    assert rlprof_command("/usr/lib/python3/site-packages/pytest/__main__.py") == f"{sys.executable} -m rlprof"


def test_python_m_rlprof_runs_rlprof():
    proc = subprocess.run([sys.executable, "-m", "rlprof", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("rlprof "), proc.stderr


def test_the_hints_pasted_twice_run_both_times_and_replace_nothing(tmp_path, monkeypatch, capsys):
    """A new user pastes each "next:" line, then pastes it again (issue 40): both runs succeed, the second
    writes beside the first (``timeline.1.json``, ``report.1.html``) and says so; the first files are kept."""
    generate_run(tmp_path / "save", ranks=2, steps=(1, 2), trace_bytes=64)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "save"]) == 0
    hints = [line.split("   (")[0] for line in next_lines(capsys)]
    assert not [h for h in hints if " -o " in h]  # nothing named: each command names its own file
    said, first = [], None
    for _ in range(2):
        for hint in hints:
            proc = subprocess.run(hint, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
            said.append(proc.stdout + proc.stderr)
        first = first or {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert sorted(first) == ["report.html", "timeline.json"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "report.1.html", "report.html", "timeline.1.json", "timeline.json"]
    assert all((tmp_path / name).read_bytes() == data for name, data in first.items())  # the first ones, untouched
    assert "wrote timeline.1.json (timeline.json exists and is kept" in said[2]
    assert "wrote report.1.html (report.html exists and is kept" in said[3]
