"""The one plugin loader (``rlprof.plugins``): one message shape for every kind of plugin, one contract
rule, the hooks called outside a run, and the deprecated entry-point groups still working with one
message each.

The plugins come from tests/fixtures/rlprof-test-plugins, pip-installed into a private directory (real
entry points, with a distribution name and version): ``outside`` implements the four hooks called
outside a run, ``unimportable`` fails to import in every group, the deprecated groups hold working
entries as third parties wrote them.
"""

from __future__ import annotations

import json
import logging
import re

import pytest

from rlprof import plugins
from rlprof.cli.report import main as report_main
from rlprof.cli import main
from rlprof.errors import BackendError
from rlprof.integrations.after_exit import NodeAgent, after_exit_steps
from rlprof.integrations.engines.contract import load_engine
from rlprof.runtime.registry import load_backend
from rlprof.testing.generated_run import generate_run

DIST = "rlprof-test-plugins 0.0.2"
SHAPE = re.compile(r'^(?P<kind>backend|engine adapter|command|after-exit hook) "unimportable" \(rlprof-test-plugins '
                   r"0\.0\.2\): import failed: ModuleNotFoundError: No module named "
                   r"'rlprof_test_plugins_this_module_does_not_exist' \(entry point rlprof_test_plugins\.missing:\w+\)$")


def deprecations(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "which is deprecated" in r.getMessage()]


def test_a_broken_backend_engine_command_and_after_exit_hook_give_the_same_message(test_plugins, capsys, caplog):
    with pytest.raises(BackendError) as backend:
        load_backend("unimportable")
    with pytest.raises(BackendError) as engine:
        load_engine("unimportable")
    assert main(["--help"]) == 0  # still works, listing every command that loads
    listed = capsys.readouterr()
    assert "hello" in listed.out and "report" in listed.out
    command = [line.removeprefix("rlprof: ") for line in listed.err.splitlines() if line.startswith('rlprof: command "')]
    with caplog.at_level(logging.ERROR, logger="rlprof"):
        after_exit_steps(["unimportable"])
    after_exit = [r.getMessage().split(": ", 2)[-1] for r in caplog.records if "after-exit hook" in r.getMessage()]
    messages = [str(backend.value), str(engine.value), *command, *after_exit]
    assert [SHAPE.match(m)["kind"] for m in messages if SHAPE.match(m)] == [
        "backend", "engine adapter", "command", "after-exit hook"], messages


def test_an_engine_adapter_follows_the_backends_contract_rule(test_plugins, caplog):
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        first, second = load_engine("undeclared"), load_engine("undeclared")
    assert callable(first.written) and callable(second.lost)  # taken as the current contract, not refused
    said = [r.getMessage() for r in caplog.records if "declares no engine contract" in r.getMessage()]
    assert said == [f'rlprof: engine adapter "undeclared" ({DIST}): declares no engine contract; taken as engine '
                    "contract 1; its author should add rlprof_contract = 1 to it (docs/migration.md)"]
    with pytest.raises(BackendError, match=rf'^engine adapter "half" \({DIST}\): does not implement: written, lost$'):
        load_engine("half")


def test_a_declared_contract_the_kind_does_not_speak_is_refused_in_the_shape():
    engine_kind = plugins.Kind("engine adapter", "g", "k", 1, (1,), "engine contract")
    with pytest.raises(plugins.ContractRefused) as info:
        plugins.contract_of(engine_kind, type("E", (), {"rlprof_contract": 7}), "e", "rlprof-e", "2.0")
    assert str(info.value) == (
        'engine adapter "e" (rlprof-e 2.0): was written for rlprof engine contract 7, which this rlprof no longer '
        "speaks (it speaks contract 1; supported: 1); update it, or ask its author to, following docs/migration.md")


def test_a_misspelled_hook_fails_at_load_naming_distribution_and_version(test_backends):
    found, problems = plugins.implementations("report_details", ["misspelled"])
    assert found == []
    [(name, line)] = problems
    assert name == "misspelled"
    assert line.startswith('backend "misspelled" (rlprof-test-backends 0.0.1): does not register: ')
    assert "start_stepp" in line


def test_hook_report_details(test_plugins, tmp_path, capsys, caplog):
    """The backend's hook answers for its files; a deprecated entry still answers for its own, said once."""
    generate_run(tmp_path, run_id="20261122-050000-aaaaaa", ranks=1, steps=(1,), tools=("outside", "legacy"),
                 trace_bytes=2 * 100)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert report_main([str(tmp_path)]) == 0
        assert report_main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("rank0.pt.trace.json.gz: 100 bytes, says outside") == 2
    assert out.count("rank0.pt.trace.json.gz: legacy details") == 2
    [said] = deprecations(caplog)
    assert said.startswith(f"rlprof: {DIST} registers entry points in the group rlprof.report_details, which is "
                           "deprecated: implement the report_details hook")


def test_hook_after_exit(test_plugins, tmp_path, caplog):
    """The node agent runs the selected tools' steps: the backend's hook and a deprecated entry's."""
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        gained = NodeAgent(str(tmp_path)).after_exit(["outside", "legacy"], pids=[], manifests={}, timeout_s=5)
    assert gained == {}
    assert (tmp_path / "outside-after-exit.txt").read_text() == "moved\n"
    assert (tmp_path / "legacy-after-exit.txt").read_text() == "moved\n"
    assert [m.split(" which")[0] for m in deprecations(caplog)] == [
        f"rlprof: {DIST} registers entry points in the group rlprof.after_exit,"]
    assert [s.owner for s in after_exit_steps(["outside"])] == ["outside"]  # only the selected tools


def test_hook_cli_commands(test_plugins, capsys, caplog):
    """A backend's command shows its own help line and runs in-process; a deprecated one still runs."""
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert main(["--help"]) == 0
        listing = " ".join(capsys.readouterr().out.split())  # argparse wraps help lines
        assert re.search(r"hello greet someone, from the outside backend \(from rlprof-test-", listing)
        assert re.search(r"old-hello greet, the old way \(an rlprof.commands entry point\)", listing)
        assert "rlprof_test_plugins" not in listing  # no entry-point strings
        assert "rlprof hello [NAME]" in listing
        assert main(["hello", "you"]) == 3
        assert capsys.readouterr().out == "hello you\n"
        assert main(["old-hello", "x"]) == 0
        assert capsys.readouterr().out == "old hello x\n"
    said = deprecations(caplog)
    assert len(said) == 1 and "group rlprof.commands" in said[0] and "cli_commands hook" in said[0]


def test_hook_trace_reader(test_plugins, tmp_path, rlprof_cli):
    """rlprof breakdown reads a file through the reader its backend names (in the worker pool); the more
    literal pattern wins a file two backends match; a broken backend costs one line in the loader's shape."""
    from rlprof.analysis.trace_readers import reader_for, readers

    answers, problems = readers()
    assert answers["outside"].format == "outside's own" and answers["torch"].format == "Kineto JSON"
    assert [line for line in problems if "unimportable" in line][0].startswith(f'backend "unimportable" ({DIST}): ')
    assert reader_for(tmp_path / "trace_view.json", answers) == "rlprof_test_plugins.outside:read_trace"
    assert reader_for(tmp_path / "rank0.pt.trace.json.gz", answers) == "rlprof_torch.kineto_reader:read_trace"
    assert list(readers(["outside"])[0]) == ["outside"]  # only the backends asked for are loaded
    (tmp_path / "a.outside").write_text("10 20")
    (tmp_path / "b.outside").write_text("not numbers")
    done = rlprof_cli("breakdown", "--json", "--workers", "2", tmp_path / "a.outside", tmp_path / "b.outside")
    assert done.returncode == 0
    rows = {row["region"]: row for row in json.loads(done.stdout)["rows"]}
    assert set(rows) == {"outside", "(trace)"}  # only a.outside's
    row = rows["outside"]
    assert (row["rank"], row["region"], row["window_ms"], row["compute_ms"], row["idle_ms"]) == (7, "outside", 10, 8, 2)
    assert f"rlprof breakdown: {tmp_path / 'b.outside'}: ValueError: " in done.stderr
    assert 'rlprof breakdown: backend "unimportable"' in done.stderr


def test_a_folder_is_walked_with_every_installed_readers_own_patterns(test_plugins, tmp_path, rlprof_cli):
    """pytest's collector, for traces: `rlprof breakdown DIR` asks every installed reader what it claims, so
    a plugin's own kind (``*.outside``) is found in a folder, at any depth; each file no reader claims is
    named with the reason, in --json and in the text, never passed over in silence."""
    from pathlib import Path

    folder = tmp_path / "brought"
    (folder / "deeper").mkdir(parents=True)
    (folder / "a.outside").write_text("10 20")
    (folder / "deeper" / "b.outside").write_text("30 45")
    (folder / "notes.txt").write_text("not a trace")
    done = rlprof_cli("breakdown", "--json", folder)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert sorted((Path(r["path"]).name, r["window_ms"]) for r in out["rows"] if r["region"] == "outside") == [
        ("a.outside", 10), ("b.outside", 15)]
    assert out["errors"] == []
    assert out["skipped"] == [{"path": str(folder / "notes.txt"), "reason": "no installed reader reads this kind of file"}]
    text = rlprof_cli("breakdown", folder)
    said = [line for line in text.stderr.splitlines() if not line.startswith('rlprof breakdown: backend "unimportable"')]
    assert said[0] == f"rlprof breakdown: {folder / 'notes.txt'}: skipped: no installed reader reads this kind of file"
    assert said[1].startswith("rlprof breakdown: the installed readers read ") and "outside: *.outside" in said[1]
    assert len(said) == 2 and "outside" in text.stdout


def test_a_built_in_command_loads_no_plugin_command(test_plugins, capsys):
    assert main(["backends"]) == 0
    captured = capsys.readouterr()
    assert "unimportable" in captured.out and "IMPORT FAILED" in captured.out
    assert 'rlprof: command "' not in captured.err  # no command plugin was looked for


def test_rlprof_backends_lists_the_hooks_outside_a_run(test_plugins, capsys):
    assert main(["backends", "--json"]) == 0
    info = {b["name"]: b for b in json.loads(capsys.readouterr().out)}
    assert info["outside"]["hooks"] == ["start_step", "report_details", "after_exit", "cli_commands", "trace_reader"]
    assert info["unimportable"]["error"].startswith(f'backend "unimportable" ({DIST}): import failed: ')
