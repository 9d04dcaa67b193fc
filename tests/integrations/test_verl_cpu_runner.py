"""``examples/verl-cpu/run.py`` before verl starts: what a new user meets on the first try (issue 46's first day).

* ``--out`` with a long path put Ray's sockets past the 107-byte limit of a Unix socket path: Ray failed
  after a 40-line traceback, then the example said "the replica recorded nothing". Now Ray's temp dir is
  kept short, and a ``RAY_TMPDIR`` too long is refused up front naming the limit.
* the run's closing ``read it: rlprof report ...`` named a bare ``rlprof`` that the user's shell does not
  have: run.py had put the venv's bin on PATH for its children. It now hands down the command as its
  user's shell runs it (``RLPROF_COMMAND``).
* a bare ``python examples/verl-cpu/run.py`` died on "No module named 'tokenizers'"; it now names the
  interpreter it runs and the one to use.

None of these start Ray or verl: they drive run.py's own functions, or its main where it stops before verl.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verl-cpu"
RUN = EXAMPLE / "run.py"
LONG = "first-day-output-directory-with-a-name-as-long-as-people-give-them-here"  # 72 characters


def _runner():
    spec = importlib.util.spec_from_file_location("verl_cpu_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run_py(monkeypatch):
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    monkeypatch.delenv("RLPROF_COMMAND", raising=False)
    return _runner()


def test_a_long_out_keeps_rays_sockets_on_a_short_path_and_links_it_from_out(run_py, tmp_path):
    ray_utils = pytest.importorskip("ray._private.utils")
    out = tmp_path / LONG
    out.mkdir()
    socket = os.path.join(str(out / "ray"), run_py.LONGEST_RAY_SOCKET)
    with pytest.raises(OSError, match="107 bytes"):  # what Ray said of the old temp dir, OUT/ray
        ray_utils.validate_socket_filepath(socket)
    env = run_py.environment(str(out))
    short = env["RAY_TMPDIR"]
    try:
        ray_utils.validate_socket_filepath(os.path.join(short, run_py.LONGEST_RAY_SOCKET))  # Ray's own check passes
        assert (out / "ray").is_symlink() and os.path.samefile(out / "ray", short)  # Ray's files are found under OUT
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_a_short_out_keeps_ray_under_it(run_py):
    out = tempfile.mkdtemp(prefix="vcpu-", dir="/tmp")
    try:
        assert run_py.environment(out)["RAY_TMPDIR"] == os.path.join(out, "ray")
    finally:
        shutil.rmtree(out)


def test_a_ray_tmpdir_too_long_is_refused_before_anything_is_built(run_py, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / LONG))
    assert run_py.main(["--out", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err
    assert "107-byte limit of a Unix socket path" in said and "RAY_TMPDIR" in said
    assert not (tmp_path / "out" / "assets").exists()  # refused up front


def test_the_closing_read_it_command_runs_in_the_users_shell(run_py, tmp_path, monkeypatch):
    """run.py's children get its interpreter's directory first on PATH (Ray's nsight plugin starts ``python``), where
    the venv's ``rlprof`` is; the user's shell (the README's setup) has neither on PATH."""
    users_path = "/usr/bin:/bin"
    monkeypatch.setenv("PATH", users_path)
    env = run_py.environment(str(tmp_path))
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    # what the verl run's closing line says, in the trainer's process (started as python -m rlprof.verl)
    said = subprocess.run([sys.executable, "-c", "from rlprof.invocation import rlprof_command; "
                           "print(rlprof_command('/site/rlprof/verl/__main__.py'))"],
                          env=env, capture_output=True, text=True, timeout=60)
    command = said.stdout.strip()
    assert said.returncode == 0 and command, said.stderr
    pasted = subprocess.run(f"{command} --version", shell=True, env={"PATH": users_path}, capture_output=True, text=True,
                            timeout=60)
    assert pasted.returncode == 0 and pasted.stdout.startswith("rlprof "), (command, pasted.stderr)


def test_an_interpreter_without_verls_packages_says_which_python_to_use(run_py, tmp_path, monkeypatch, capsys):
    """Stand-in for a bare system python: the modules run.py needs are not found (its one check, find_spec)."""
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in run_py.NEEDED else found(name, *a))
    assert run_py.main(["--out", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert f"this interpreter ({sys.executable}) cannot import verl, tokenizers" in said
    assert ".venv/bin/python examples/verl-cpu/run.py" in said
    assert not (tmp_path / "assets").exists()
