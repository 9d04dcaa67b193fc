"""A new user's first day: every way ``rlprof demo`` can be asked for the impossible ends in one plain
sentence, fast, before Ray starts, with exit status 2 and no traceback; settings the machine cannot
honour are said in ``rlprof check``.

Each case runs the real command line in a fresh interpreter (as a user types it). "Fast" is checked without a
clock: the refusal comes before Ray is even imported (what makes a start slow: Ray's import and start take
longer than the 15 s the issue allowed a refusal), so no busy machine can fail it (before: a 15 s bound)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA device")


def rlprof(*args: str, cwd, env_code: str = "") -> tuple[subprocess.CompletedProcess, bool]:
    """``rlprof ARGS`` in a fresh interpreter; ``env_code`` runs first (e.g. hiding a package). Returns the
    process and whether it had imported Ray by its exit (written by an exit handler to a file of its own)."""
    said = Path(tempfile.mkdtemp(dir=cwd)) / "imported"
    code = (f"{env_code}\nimport atexit, sys\n"
            f"atexit.register(lambda: open({str(said)!r}, 'w').write(str('ray' in sys.modules)))\n"
            f"from rlprof.cli import main\nsys.exit(main({list(args)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd)
    return proc, said.read_text() == "True"


def assert_refused(proc, imported_ray: bool, *phrases: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    assert not imported_ray, "refused only after importing Ray"
    assert "ray started" not in proc.stdout  # refused before Ray
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    # one plain message: one line, or a heading and one "- " line per mistake (a flag written into several roles)
    assert lines[0].startswith("rlprof demo: "), proc.stderr
    assert len(lines) == 1 or all(line.startswith("- ") for line in lines[1:]), proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("args", "phrases"),
    [
        (["--workers", "0"], ["--workers: got 0; allowed: 1 or more"]),
        (["--workers", "-3"], ["--workers: got -3"]),
        (["--steps", "0"], ["global_profiler.steps: got [0]", "counted from 1"]),
        (["--steps", "5", "--train-steps", "3"], ["step 5 is after the last training step (3)", "--train-steps 5"]),
        (["--steps", "2,4", "--train-steps", "3"], ["step 4 is after the last training step (3)"]),
        (["--train-steps", "0"], ["--train-steps: got 0"]),
        (["--timeout", "0"], ["--timeout: got 0"]),
        (["--steps", "one"], ["--steps: got 'one'", "comma-separated integers"]),
        (["--tool", "nope"], ["global_profiler.tool: got 'nope'", "Installed backends:"]),
        (["--ranks", "5"], ["ranks: got [5]", "outside a world of 2"]),
        (["--workers", "1", "--ranks", "1"], ["outside a world of 1"]),
        (["--ranks", ""], ["nothing would be captured: no role is selected on any of the 2 worker ranks"]),
    ],
)
def test_impossible_runs_are_refused_before_ray_starts(tmp_path, args, phrases):
    assert_refused(*rlprof("demo", *args, "--save-path", str(tmp_path / "p"), cwd=tmp_path), *phrases)


def test_a_save_path_that_cannot_be_used_is_refused(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc, imported = rlprof("demo", "--save-path", str(blocker / "profile"), cwd=tmp_path)
    assert_refused(proc, imported, "--save-path", "cannot be used", "not a directory")
    assert blocker.read_text() == "not a directory"


@no_cuda
def test_torch_memory_on_a_machine_without_cuda_says_why_nothing_would_be_captured(tmp_path):
    proc, imported = rlprof("demo", "--tool", "torch_memory", "--save-path", str(tmp_path / "p"), cwd=tmp_path)
    assert_refused(proc, imported, "nothing would be captured on this machine because torch_memory cannot capture here",
                   "no CUDA device")
    assert not (tmp_path / "p").exists()


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu is installed here")
def test_npu_without_torch_npu_says_why_nothing_would_be_captured(tmp_path):
    proc, imported = rlprof("demo", "--tool", "npu", "--save-path", str(tmp_path / "p"), cwd=tmp_path)
    assert_refused(proc, imported, "nothing would be captured on this machine because npu cannot capture here",
                   "torch_npu cannot be imported")


def test_nsys_without_nsys_on_path_is_refused_instead_of_timing_out(tmp_path):
    # without a GPU the nsys demo runs (capture windows as NVTX ranges: plugins/nsys/tests/test_nsys_real.py);
    # without the nsys CLI nothing can be captured, and the demo says so before starting Ray
    pytest.importorskip("rlprof_nsys")
    hide_nsys = "import os, sys\nos.environ['PATH'] = os.path.dirname(sys.executable)"
    proc, imported = rlprof("demo", "--tool", "nsys", "--save-path", str(tmp_path / "p"), cwd=tmp_path, env_code=hide_nsys)
    assert_refused(proc, imported, "nothing would be captured on this machine because nsys cannot capture here",
                   "nsys (Nsight Systems CLI) is not on PATH")


HIDE_RAY = """
import sys
class HideRay:
    '''Behaves as if ray were not installed (an import of it fails as an absent package's does).'''
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HideRay())
"""


def test_without_ray_the_demo_names_the_package_to_install(tmp_path):
    proc, imported = rlprof("demo", "--save-path", str(tmp_path / "p"), cwd=tmp_path, env_code=HIDE_RAY)
    assert_refused(proc, imported, "the demo needs ray, which is not installed", "pip install")


@no_cuda
def test_check_warns_when_contents_asks_for_cuda_on_a_machine_without_it(tmp_path):
    pytest.importorskip("rlprof_torch")
    proc, _ = rlprof("check", "global_profiler.tool=torch", "global_profiler.steps=[1]",
                     "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
                     "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cuda,cpu]", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "asks for 'cuda'" in line]
    # rollout and ref follow the actor's section: three role sections, one warning
    assert len(said) == 1 and "no CUDA device" in said[0] and "CPU activity only" in said[0]
    assert "Traceback" not in proc.stderr


def test_the_torch_backend_keeps_kinetos_console_lines_out_of_the_training_output(tmp_path):
    """torch 2.13's Kineto prints ``USDT:... profiler_start`` / ``profiler_stop`` to stderr at every
    capture; the torch backend sets ``KINETO_LOG_LEVEL`` before its first capture unless the user did."""
    pytest.importorskip("rlprof_torch")
    import json
    import os
    from pathlib import Path

    workload = Path(__file__).resolve().parents[2] / "plugins" / "torch" / "tests" / "torch_workload.py"
    config = {"global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": str(tmp_path / "p")},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    spec = json.dumps({"config": config, "rank": 0, "world_size": 1, "run_id": "quiet", "steps": [1, 2]})

    def stderr_of(**env: str) -> str:
        environment = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"} | env
        proc = subprocess.run([sys.executable, str(workload), spec], capture_output=True, text=True, timeout=180,
                              env=environment, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    quiet = stderr_of()
    assert "profiler_start" not in quiet and "USDT" not in quiet
    assert "profiler_start" in stderr_of(KINETO_LOG_LEVEL="4")  # the user's own choice wins
    assert len(list((tmp_path / "p").rglob("*.pt.trace.json.gz"))) == 4  # 2 runs x 2 steps: the traces still come


def test_demo_help_is_plain_text(tmp_path):
    proc, _ = rlprof("demo", "--help", cwd=tmp_path)
    assert proc.returncode == 0 and "``" not in proc.stdout and "exit status: 0" in proc.stdout


def test_verl_torch_keys_rlprof_ignores_are_said_when_set(tmp_path):
    """Older verl's tool_config.torch.step_start/step_end/manual_save do nothing in rlprof: set to
    anything but verl's defaults, `rlprof check` says so (once) and what to use instead."""
    pytest.importorskip("rlprof_torch")
    base = ["global_profiler.tool=torch", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.all_ranks=true"]
    proc, _ = rlprof("check", *base, "actor_rollout_ref.actor.profiler.tool_config.torch.step_start=2",
                     "actor_rollout_ref.actor.profiler.tool_config.torch.step_end=4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "is ignored" in line]
    assert len(said) == 2 and all("profiler.schedule" in line for line in said), proc.stderr
    quiet, _ = rlprof("check", *base, "actor_rollout_ref.actor.profiler.tool_config.torch.step_start=-1", cwd=tmp_path)
    assert "is ignored" not in quiet.stderr  # verl's default means "not set"


ISSUE_CITATION = re.compile(r"\b[Ii]ssues? #?\d")
"""How the project's own tracker was cited in text a user reads ("(issue 42)"): meaningless to a user."""


def test_no_command_help_cites_the_projects_issues(capsys):
    from rlprof.cli import BUILTIN, main

    for args in (["--help"], *([c.name, "--help"] for c in BUILTIN)):
        try:
            main(args)
        except SystemExit:  # argparse's --help
            pass
        said = capsys.readouterr()
        assert not ISSUE_CITATION.search(said.out + said.err), f"rlprof {' '.join(args)}: {said.out}"


def test_no_user_document_cites_the_projects_issues():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    documents = [root / "README.md", *(root / "docs").glob("*.md"), *root.glob("examples/*/README.md"),
                 *root.glob("plugins/*/README.md")]
    cited = [f"{d.relative_to(root)}:{n}: {line.strip()}" for d in documents
             for n, line in enumerate(d.read_text(encoding="utf-8").splitlines(), 1) if ISSUE_CITATION.search(line)]
    assert not cited, "\n".join(cited)
