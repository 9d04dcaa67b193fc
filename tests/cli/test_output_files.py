"""Files rlprof's commands write where the user works (issue 40): never a file the user did not name as
replaceable. ``-o FILE`` that exists is refused (exit 2, the path, how to say yes: ``--force``); without ``-o``
a command names its file itself and writes the next free numbered name beside a taken one. One rule,
:mod:`rlprof.cli.output_file`, for every command that writes a file."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rlprof.cli import BUILTIN, _plugin_commands
from rlprof.cli.output_file import OutputRefused, choose
from rlprof.testing.generated_run import generate_run

# (command and its arguments before the output, the file it names itself)
WRITERS = {
    "report --html": (["report", "{run}", "--html"], "report.html"),
    "timeline": (["timeline", "{run}"], "timeline.json"),
}


@pytest.fixture
def run(tmp_path) -> Path:
    return generate_run(tmp_path / "save", ranks=2, steps=(1, 2))


def command(name: str, run: Path) -> tuple[list[str], str]:
    args, default = WRITERS[name]
    return [a.format(run=run) for a in args], default


@pytest.mark.parametrize("name", WRITERS)
def test_an_existing_file_named_with_o_is_refused_unless_forced(name, run, tmp_path, rlprof_cli):
    args, _ = command(name, run)
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's notes\n")
    refused = rlprof_cli(*args, "-o", mine)
    assert refused.returncode == 2 and mine.read_text() == "the user's notes\n"
    assert f"{mine} exists; nothing was written" in refused.stderr and "Add --force to replace it" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt", "save"]  # no temporary file either
    forced = rlprof_cli(*args, "-o", mine, "--force")
    assert forced.returncode == 0 and mine.read_text() != "the user's notes\n"
    again = rlprof_cli(*args, "-o", mine)  # its own earlier output is not replaced unasked either
    assert again.returncode == 2 and "exists; nothing was written" in again.stderr
    directory = tmp_path / "a-directory"
    directory.mkdir()
    assert rlprof_cli(*args, "-o", directory, "--force").returncode == 2 and list(directory.iterdir()) == []


@pytest.mark.parametrize("name", WRITERS)
def test_without_o_the_command_names_its_file_and_never_replaces_one(name, run, tmp_path, monkeypatch, rlprof_cli):
    args, default = command(name, run)
    monkeypatch.chdir(tmp_path)
    first = rlprof_cli(*args)
    assert first.returncode == 0 and f"wrote {default}" in first.stdout + first.stderr
    content = Path(default).read_bytes()
    second = rlprof_cli(*args)
    numbered = Path(default).stem + ".1" + Path(default).suffix
    assert second.returncode == 0
    assert f"wrote {numbered} ({default} exists and is kept" in second.stdout + second.stderr
    assert Path(default).read_bytes() == content and Path(numbered).stat().st_size > 0


def test_every_command_that_takes_an_output_file_follows_the_rule(rlprof_cli):
    """A command added later (built in, or a plugin's ``cli_commands``) that writes a file named with -o
    says --force in its help: the rule's arguments come from :func:`rlprof.cli.output_file.add_arguments`."""
    names = [c.name for c in BUILTIN] + [c.name for c in _plugin_commands()]
    takes_o = []
    for name in names:
        shown = rlprof_cli(name, "--help")
        if " -o " in shown.stdout or "--output" in shown.stdout:
            takes_o.append(name)
            assert "--force" in shown.stdout and "never replaced unless --force" in " ".join(shown.stdout.split()), name
    assert {"report", "timeline"} <= set(takes_o)


# ---------------------------------------------------------------------- the rule itself


def test_choose_names_a_free_file_or_refuses(tmp_path):
    taken = tmp_path / "out.json"
    taken.write_text("x")
    with pytest.raises(OutputRefused, match=r"out.json exists; nothing was written .* --force"):
        choose(taken, default="unused.json")
    assert choose(taken, default="unused.json", force=True).path == taken
    assert choose(tmp_path / "new.json", default="unused.json").path == tmp_path / "new.json"
    with pytest.raises(OutputRefused, match="is a directory"):
        choose(tmp_path, default="unused.json", force=True)
    default = tmp_path / "timeline.json"
    assert choose(None, default=str(default)).path == default
    default.write_text("x")
    (tmp_path / "timeline.1.json").symlink_to(tmp_path / "elsewhere")  # a dangling link takes its name too
    assert choose(None, default=str(default)).path == tmp_path / "timeline.2.json"


def test_a_name_taken_while_the_file_is_written_is_not_replaced(tmp_path):
    named = choose(tmp_path / "page.html", default="unused.html")
    own = choose(None, default=str(tmp_path / "report.html"))
    with pytest.raises(OutputRefused, match="exists"):
        with named.writing() as handle:
            handle.write("rlprof's")
            (tmp_path / "page.html").write_text("someone else's")  # appears meanwhile
    with own.writing() as handle:
        handle.write("rlprof's")
        (tmp_path / "report.html").write_text("someone else's")
    assert (tmp_path / "page.html").read_text() == (tmp_path / "report.html").read_text() == "someone else's"
    assert own.path == tmp_path / "report.1.html" and own.path.read_text() == "rlprof's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "report.1.html", "report.html"]


def test_a_failed_write_leaves_nothing(tmp_path):
    target = choose(None, default=str(tmp_path / "timeline.json"))
    with pytest.raises(RuntimeError):
        with target.writing() as handle:
            handle.write("half")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_two_commands_at_once_each_keep_their_file(tmp_path):
    """The same hint pasted into two terminals at once: two files, neither replaced."""
    default = str(tmp_path / "timeline.json")
    start = threading.Barrier(8)

    def write(n):
        target = choose(None, default=default)
        start.wait()
        with target.writing() as handle:
            handle.write(str(n))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.read_text() for p in tmp_path.iterdir()) == [str(n) for n in range(8)]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]
