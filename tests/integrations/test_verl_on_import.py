"""Patching a verl module when it is imported (rlprof.integrations.verl.on_import), on real modules."""

import logging
import subprocess
import sys
import textwrap

import pytest

from rlprof.integrations.verl import on_import


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A fresh importable module name per test, written to a temporary directory on sys.path."""
    name = f"rlprof_probe_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text("VALUE = 'as written'\n\ndef answer():\n    return VALUE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    on_import.forget(name)
    sys.modules.pop(name, None)


def mark(module):
    module.VALUE = "patched"


def test_a_module_imported_later_is_patched_right_after_it_executes(package):
    on_import.when_imported(package, mark)
    assert package not in sys.modules  # nothing is imported early
    module = __import__(package)
    assert module.answer() == "patched"
    assert module.__spec__.loader.get_source(package).startswith("VALUE = 'as written'")  # the loader still answers


def test_two_parts_of_the_drop_in_patching_one_module_both_run_in_order(package):
    # verl's trainer module is patched for its phases and for its unprofiled steps: neither may drop the other
    seen = []
    on_import.when_imported(package, lambda module: seen.append("phases"))
    on_import.when_imported(package, lambda module: seen.append("steps"))
    __import__(package)
    assert seen == ["phases", "steps"]


def test_a_module_already_loaded_is_patched_at_once(package):
    module = __import__(package)
    on_import.when_imported(package, mark)
    assert module.answer() == "patched"


def test_a_patch_that_raises_leaves_the_module_as_written_and_says_so(package, caplog):
    def broken(module):
        raise RuntimeError("verl changed")

    on_import.when_imported(package, broken)
    with caplog.at_level(logging.ERROR, logger="rlprof"):
        module = __import__(package)
    assert module.answer() == "as written"
    assert "patching" in caplog.text and "verl changed" in caplog.text


def test_forget_cancels_a_pending_patch(package):
    on_import.when_imported(package, mark)
    on_import.forget(package)
    assert __import__(package).answer() == "as written"


@pytest.mark.skipif(__import__("importlib").util.find_spec("verl") is None, reason="verl is not installed")
def test_switching_rlprof_on_never_imports_vllm():
    code = textwrap.dedent("""
        import sys
        import rlprof.verl
        rlprof.verl.install()
        from rlprof.integrations.verl import on_import, vllm_server
        print(sorted(m for m in ("vllm", vllm_server.MODULE) if m in sys.modules), vllm_server.MODULE in on_import._pending)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["[]", "True"]
