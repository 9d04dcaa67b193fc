"""``rlprof report`` still asks the deprecated ``rlprof.report_details`` entry points for per-file details
(the backends' ``report_details`` hook replaced them: tests/leaves/test_plugins.py).

A small distribution is pip-installed into a private directory (real entry points, found by
``importlib.metadata``): one function works, one raises, one fails to import. The report shows the
lines, and never breaks; a failed import is the loader's one line naming distribution and version.
"""

import importlib
import json
import subprocess
import sys
import textwrap

import pytest

from rlprof.cli.report import main
from rlprof.testing.generated_run import generate_run

RUN = "20261122-050000-aaaaaa"


@pytest.fixture(scope="module")
def details_site(tmp_path_factory):
    source = tmp_path_factory.mktemp("details-dist")
    (source / "pyproject.toml").write_text(textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "rlprof-test-details"
        version = "0.0.1"
        [project.entry-points."rlprof.report_details"]
        good = "rlprof_test_details:size_line"
        raises = "rlprof_test_details:broken"
        absent = "rlprof_test_details_missing:nothing"
        [tool.setuptools]
        py-modules = ["rlprof_test_details"]
    """))
    (source / "rlprof_test_details.py").write_text(textwrap.dedent("""
        def size_line(path):
            return [f"{path.name}: {path.stat().st_size} bytes on disk"]

        def broken(path):
            raise RuntimeError("nsys stats crashed")
    """))
    target = tmp_path_factory.mktemp("details-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target),
                    str(source)], check=True)
    return target


@pytest.fixture
def with_details(details_site, monkeypatch):
    monkeypatch.syspath_prepend(str(details_site))
    importlib.invalidate_caches()
    sys.modules.pop("rlprof_test_details", None)


@pytest.mark.slow
def test_backend_details_are_shown_and_failures_contained(tmp_path, with_details, capsys):
    generate_run(tmp_path, run_id=RUN, ranks=1, steps=(1,), tools=("good", "raises", "absent"), trace_bytes=3 * 100)
    assert main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "rank0.pt.trace.json.gz: 100 bytes on disk" in captured.out
    assert "details unavailable: RuntimeError: nsys stats crashed" in captured.out
    assert ('details unavailable: report details "absent" (rlprof-test-details 0.0.1): import failed: '
            "ModuleNotFoundError") in captured.out
    assert 'rlprof report: report details "absent" (rlprof-test-details 0.0.1): import failed' in captured.err
    assert main([str(tmp_path), "--json"]) == 0
    files = {f["backend"]: f for f in json.loads(capsys.readouterr().out)["runs"][0]["files"]}
    assert files["good"]["details"] == ["rank0.pt.trace.json.gz: 100 bytes on disk"]
    assert main([str(tmp_path), "--no-details"]) == 0
    assert "bytes on disk" not in capsys.readouterr().out


@pytest.mark.slow
def test_no_details_for_files_that_are_gone(tmp_path, with_details, capsys):
    run_dir = generate_run(tmp_path, run_id=RUN, ranks=1, steps=(1,), tools=("good",), trace_bytes=100)
    for trace in run_dir.rglob("*.pt.trace.json.gz"):
        trace.unlink()
    assert main([str(tmp_path)]) == 0
    assert "bytes on disk" not in capsys.readouterr().out
