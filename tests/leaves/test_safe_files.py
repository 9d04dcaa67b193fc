"""rlprof.layout's safe writing: a link planted under save_path is refused, never followed; nothing
existing is replaced; long names are shortened, never dropped; an unusable save_path is explained."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from rlprof.layout import (MAX_NAME, ScratchDir, UnsafePathError, check_save_path, ensure_dir, numbered, open_file, place,
                           place_reserved, release_held_dirs, reserve, safe_name, tool_output, write_reserved)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree(root: Path) -> dict[str, str]:
    """Every entry under root (links not followed) with its content hash or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = digest(p)
            else:
                out[rel] = "dir"
    return out


@pytest.fixture
def victim(tmp_path):
    """A directory outside save_path holding a file the attacker wants overwritten."""
    outside = tmp_path / "victim"
    outside.mkdir()
    (outside / "precious.txt").write_text("the user's data\n")
    return outside


@pytest.fixture
def save_path(tmp_path):
    path = tmp_path / "save"
    path.mkdir()
    return path


def attempt(fn):
    try:
        fn()
    except UnsafePathError as exc:
        return exc
    raise AssertionError("the write was not refused")


# ---------------------------------------------------------------------- planted links


def test_link_planted_as_run_directory_is_refused(save_path, victim):
    before = tree(victim)
    run = save_path / "20261122-run"
    run.symlink_to(victim, target_is_directory=True)
    exc = attempt(lambda: ensure_dir(run / "step1" / "rank0-h-1" / "torch", run))
    assert str(run) in str(exc) and "symbolic link" in str(exc)
    exc = attempt(lambda: open_file(run / "manifest" / "rank0.jsonl", run, "a"))
    assert str(run) in str(exc)
    assert tree(victim) == before


def test_link_planted_as_intermediate_directory_is_refused(save_path, victim):
    before = tree(victim)
    run = save_path / "run"
    (run / "step1").mkdir(parents=True)
    (run / "step1" / "rank0-h-1").symlink_to(victim, target_is_directory=True)
    exc = attempt(lambda: ensure_dir(run / "step1" / "rank0-h-1" / "torch", run))
    assert exc.filename == str(run / "step1" / "rank0-h-1")
    exc = attempt(lambda: open_file(run / "step1" / "rank0-h-1" / "torch" / "trace.json", run))
    assert "symbolic link" in str(exc)
    assert tree(victim) == before
    assert not (victim / "torch").exists()


def test_link_planted_as_trace_file_is_refused_and_target_untouched(save_path, victim):
    before = digest(victim / "precious.txt")
    run = save_path / "run"
    trace_dir = ensure_dir(run / "step1" / "rank0-h-1" / "torch", run)
    trace = trace_dir / "rank0.pt.trace.json"
    trace.symlink_to(victim / "precious.txt")
    for mode in ("w", "wb", "a", "ab"):
        exc = attempt(lambda: open_file(trace, run, mode))
        assert exc.filename == str(trace)
    # a dangling link (target does not exist yet) must not create the target either
    dangling = trace_dir / "rank0.other.json"
    dangling.symlink_to(victim / "created-by-rlprof.txt")
    attempt(lambda: open_file(dangling, run, "w"))
    attempt(lambda: open_file(dangling, run, "a"))
    assert digest(victim / "precious.txt") == before
    assert not (victim / "created-by-rlprof.txt").exists()


def test_link_planted_as_manifest_name_is_refused(save_path, victim):
    before = tree(victim)
    run = save_path / "run"
    (run / "manifest").mkdir(parents=True)
    manifest = run / "manifest" / "rank0-h-1.jsonl"
    manifest.symlink_to(victim / "precious.txt")
    exc = attempt(lambda: open_file(manifest, run, "a"))
    assert str(manifest) in str(exc)
    (run / "manifest2").symlink_to(victim, target_is_directory=True)
    attempt(lambda: open_file(run / "manifest2" / "rank0-h-1.jsonl", run, "a"))
    assert tree(victim) == before


def test_directory_swapped_for_a_link_after_it_was_made_is_not_followed(save_path, victim):
    # The run directory and the last directory walked to stay open between calls (a capture's directory
    # is made when it opens and written into when it closes): a swap in between must still be refused.
    before = tree(victim)
    run = save_path / "run"
    capture = run / "step1" / "rank0-h-1" / "torch"
    ensure_dir(capture, run)
    capture.rename(capture.with_name("torch.moved"))
    capture.symlink_to(victim, target_is_directory=True)
    exc = attempt(lambda: open_file(capture / "rank0.pt.trace.json.gz", run, "wb"))
    assert exc.filename == str(capture)
    run.rename(save_path / "run.moved")
    run.symlink_to(victim, target_is_directory=True)
    exc = attempt(lambda: ensure_dir(run / "step2" / "rank0-h-1" / "torch", run))
    assert exc.filename == str(run)
    assert tree(victim) == before


def test_directory_removed_after_it_was_made_is_made_again(save_path):
    run = save_path / "run"
    capture = run / "step1" / "rank0-h-1" / "torch"
    ensure_dir(capture, run)
    shutil.rmtree(run / "step1")
    with open_file(capture / "trace.json", run, "wb") as handle:
        handle.write(b"{}")
    assert (capture / "trace.json").read_bytes() == b"{}"
    shutil.rmtree(run)
    ensure_dir(run / "step2", run)
    assert (run / "step2").is_dir()


def test_a_forked_child_walks_on_its_own_and_leaves_its_parents_held_directories_open(save_path):
    run = save_path / "run"
    ensure_dir(run / "step1" / "rank0-h-1" / "torch", run)  # the parent now holds the run directory open
    pid = os.fork()
    if pid == 0:  # the child: its own walk works, and release_held_dirs closes nothing of the parent's
        code = 1
        try:
            ensure_dir(run / "step2" / "rank0-h-1" / "torch", run)
            release_held_dirs()
            code = 0 if (run / "step2" / "rank0-h-1" / "torch").is_dir() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with open_file(run / "step1" / "rank0-h-1" / "torch" / "trace.json", run, "wb") as handle:
        handle.write(b"{}")


def test_release_held_dirs_leaves_no_descriptor_under_the_run(save_path):
    run = save_path / "run"
    with open_file(run / "step1" / "rank0-h-1" / "torch" / "trace.json", run, "wb") as handle:
        handle.write(b"{}")
    def under_run():
        return [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                if os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}").startswith(str(run))]
    assert under_run()  # held between walks
    release_held_dirs()
    assert under_run() == []


def test_hard_link_and_fifo_are_refused(save_path, victim):
    run = save_path / "run"
    ensure_dir(run / "manifest", run)
    os.link(victim / "precious.txt", run / "manifest" / "rank0.jsonl")
    attempt(lambda: open_file(run / "manifest" / "rank0.jsonl", run, "a"))
    os.mkfifo(run / "manifest" / "rank1.jsonl")
    attempt(lambda: open_file(run / "manifest" / "rank1.jsonl", run, "a"))  # does not block: no reader
    assert (victim / "precious.txt").read_text() == "the user's data\n"


def test_paths_outside_root_are_refused(save_path, victim):
    run = save_path / "run"
    attempt(lambda: ensure_dir(victim / "x", run))
    attempt(lambda: open_file(run / ".." / ".." / "victim" / "x.txt", run))
    assert sorted(os.listdir(victim)) == ["precious.txt"]


# ---------------------------------------------------------------------- normal use


def test_open_file_never_replaces_and_appends_in_place(save_path):
    run = save_path / "run"
    target = run / "step1" / "rank0-h-1" / "torch" / "trace.json"
    with open_file(target, run) as handle:
        handle.write("first")
    with pytest.raises(FileExistsError):
        open_file(target, run, "w")
    with pytest.raises(FileExistsError):
        open_file(target, run, "wb")
    assert target.read_text() == "first"
    with open_file(run / "manifest" / "m.jsonl", run, "a") as handle:
        handle.write("one\n")
    with open_file(run / "manifest" / "m.jsonl", run, "ab") as handle:
        handle.write(b"two\n")
    assert (run / "manifest" / "m.jsonl").read_text() == "one\ntwo\n"
    assert tree(save_path).keys() == {
        "run", "run/step1", "run/step1/rank0-h-1", "run/step1/rank0-h-1/torch",
        "run/step1/rank0-h-1/torch/trace.json", "run/manifest", "run/manifest/m.jsonl",
    }


def test_save_path_behind_a_users_link_still_works(tmp_path):
    """Links above the run directory are the user's choice (save_path on a scratch disk)."""
    disk = tmp_path / "scratch"
    disk.mkdir()
    (tmp_path / "outputs").symlink_to(disk, target_is_directory=True)
    run = tmp_path / "outputs" / "profile" / "run"
    with open_file(run / "manifest" / "m.jsonl", run, "a") as handle:
        handle.write("x\n")
    assert (disk / "profile" / "run" / "manifest" / "m.jsonl").read_text() == "x\n"


def test_unknown_mode_is_a_clear_error(save_path):
    with pytest.raises(ValueError, match="mode 'r'"):
        open_file(save_path / "run" / "x", save_path / "run", "r")


# ---------------------------------------------------------------------- names


def test_long_stage_name_is_shortened_deterministically_with_hash():
    stage = "actor_update_" + "x" * 287
    assert len(stage) == 300
    name = safe_name(stage)
    assert len(name) <= MAX_NAME
    assert name == safe_name(stage)  # deterministic across calls (and processes: sha1, not hash())
    assert re.fullmatch(r"actor_update_x+-[0-9a-f]{8}", name)
    assert name.endswith(hashlib.sha1(stage.encode()).hexdigest()[:8])
    other = "actor_update_" + "x" * 286 + "y"
    assert safe_name(other) != name  # same first 100 characters, different names
    assert safe_name("a" * MAX_NAME) == "a" * MAX_NAME  # up to the cap: unchanged
    spaced = "rollout generate " * 30  # cleaned first, then shortened
    assert safe_name(spaced) == ("rollout_generate_" * 6)[:100] + "-" + hashlib.sha1(spaced.encode()).hexdigest()[:8]


def test_long_name_is_usable_as_a_file_name(save_path):
    run = save_path / "run"
    name = safe_name("step3." + "actor_" + "z" * 400) + ".3.pt.trace.json.gz"
    with open_file(run / name / "rank0-host-123" / "torch" / name, run) as handle:
        handle.write("ok")


def test_same_output_in_another_process():
    code = "from rlprof.layout import safe_name; print(safe_name('s' * 500))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == safe_name("s" * 500)


# ---------------------------------------------------------------------- check_save_path


def test_check_save_path_accepts_usable_paths(tmp_path):
    assert check_save_path(tmp_path) is None
    assert check_save_path(str(tmp_path / "not" / "yet" / "there")) is None
    assert not (tmp_path / "not").exists()  # nothing left behind


def test_check_save_path_names_a_file(tmp_path):
    file = tmp_path / "profile"
    file.write_text("")
    assert check_save_path(file) == f"{file} is a file, not a directory"
    reason = check_save_path(file / "sub" / "dir")
    assert reason == f"{file} is a file, not a directory"


def test_check_save_path_nul_and_long_component(tmp_path):
    assert "NUL byte" in check_save_path(str(tmp_path) + "/a\0b")
    reason = check_save_path(tmp_path / ("c" * 300))
    assert "300 bytes long" in reason and "255" in reason
    assert "empty" in check_save_path("")
    assert check_save_path(42) == "it is a int, not a path"


def test_check_save_path_symlink_loop(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert "symbolic link loop" in check_save_path(tmp_path / "a" / "profile")


def as_nobody(fn, *args):
    """``fn(*args)`` in a forked child that dropped root for user nobody; its result as text."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, str(fn(*args)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = pipe.read()
    os.waitpid(pid, 0)
    return out


def test_check_save_path_read_only_directory_for_an_ordinary_user():
    """A 0o500 directory: not writable for an ordinary user. As root, run the check as one (nobody)."""
    base = Path(tempfile.mkdtemp(prefix="rlprof-ro-"))  # /tmp itself is searchable by everyone
    try:
        os.chmod(base, 0o755)
        ro = base / "ro"
        ro.mkdir(mode=0o500)
        if os.geteuid() != 0:
            assert check_save_path(ro / "profile") == f"{ro} is not writable by this user (mode dr-x------)"
            return
        assert as_nobody(check_save_path, ro / "profile") == f"{ro} is not writable by this user (mode dr-x------)"
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(os.geteuid() != 0, reason="root-only: the honest answer for root")
def test_check_save_path_mode_0500_is_writable_for_root(tmp_path):
    """access(2) for root ignores mode bits on a writable file system; so does the check, because
    Profiler() running as root can in fact write there."""
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    assert check_save_path(ro / "profile") is None
    (ro / "profile").mkdir()  # and the truth: root can


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/unshare").exists(), reason="needs root and unshare(1)")
def test_check_save_path_read_only_file_system(tmp_path):
    """A read-only file system stops root too; mounted in a private mount namespace."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = (
        "import subprocess, sys; "
        f"subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', {str(mnt)!r}], check=True); "
        f"from rlprof.layout import check_save_path; print(check_save_path({str(mnt / 'profile')!r}))"
    )
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", code],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount here: {result.stderr.strip()[-200:]}")
    assert result.stdout.strip() == f"{mnt} is on a read-only file system"


def test_ranks_creating_the_same_directories_at_once_do_not_fail(save_path):
    """Every rank of a node creates <run>/step1/... at the same moment; nobody's mkdir may fail."""
    import threading

    run = save_path / "run"
    failures = []

    def rank(r):
        try:
            for step in range(1, 20):
                with open_file(run / f"step{step}" / f"rank{r}-h-1" / "torch" / "t.json", run) as handle:
                    handle.write(str(r))
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            failures.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(list(run.rglob("t.json"))) == 8 * 19


# ---------------------------------------------------------------------- tools that write by path


def test_tool_output_places_what_the_tool_wrote(save_path):
    run = save_path / "run"
    target = run / "step1" / "rank0-h-1" / "torch_memory" / "snapshot.pickle"
    with tool_output(target, run) as scratch:
        assert scratch.name == target.name and scratch.parent.parent == target.parent
        assert stat.S_IMODE(scratch.parent.stat().st_mode) == 0o700
        scratch.write_bytes(b"snapshot")  # the tool, writing by path
    assert target.read_bytes() == b"snapshot"
    assert os.listdir(target.parent) == ["snapshot.pickle"]  # the private directory is gone


def test_tool_output_never_replaces_nor_follows(save_path, victim):
    run = save_path / "run"
    directory = ensure_dir(run / "step1" / "rank0-h-1" / "torch_memory", run)
    (directory / "kept.pickle").write_bytes(b"first run")
    with pytest.raises(FileExistsError):
        with tool_output(directory / "kept.pickle", run) as scratch:
            scratch.write_bytes(b"second")
    assert (directory / "kept.pickle").read_bytes() == b"first run"
    (directory / "planted.pickle").symlink_to(victim / "precious.txt")
    (directory / "dangling.pickle").symlink_to(victim / "new.txt")
    for name in ("planted.pickle", "dangling.pickle"):
        exc = attempt(lambda: _write_through(directory / name, run))
        assert exc.filename == str(directory / name)
    assert sorted(os.listdir(victim)) == ["precious.txt"]
    assert (victim / "precious.txt").read_text() == "the user's data\n"
    assert sorted(os.listdir(directory)) == ["dangling.pickle", "kept.pickle", "planted.pickle"]


def _write_through(target, root):
    with tool_output(target, root) as scratch:
        scratch.write_bytes(b"x")


def test_tool_output_places_nothing_when_the_tool_fails(save_path):
    run = save_path / "run"
    target = run / "step1" / "snap.pickle"
    with pytest.raises(RuntimeError):
        with tool_output(target, run) as scratch:
            scratch.write_bytes(b"half")
            raise RuntimeError("CUDA error")
    assert os.listdir(target.parent) == []


# ---------------------------------------------------------------------- names claimed before the bytes come


def test_numbered_names_keep_every_suffix():
    assert numbered(Path("d/rank0.pt.trace.json.gz"), 1) == Path("d/rank0.1.pt.trace.json.gz")
    assert numbered("snapshot.pickle", 12).name == "snapshot.12.pickle"
    assert numbered("report", 2).name == "report.2" and numbered(".hidden.txt", 1).name == ".hidden.1.txt"
    assert numbered("rank0.pt.trace.json.gz", 0).name == "rank0.pt.trace.json.gz"


def test_a_taken_name_gives_the_next_free_one_and_nothing_is_replaced(save_path):
    run = save_path / "run"
    directory = ensure_dir(run / "step1" / "rank0-h-1" / "torch", run)
    target = directory / "rank0.pt.trace.json.gz"
    first = reserve(target, run)
    second = reserve(target, run)  # the first is still being written: its name is taken all the same
    assert (first.path, second.path) == (target, numbered(target, 1))
    second.handle.write(b"second")
    first.handle.write(b"first")
    assert second.place() == numbered(target, 1)  # placed first, under its own name
    assert first.place() == target
    third = reserve(target, run)
    third.abandon()  # given up: its name is free again, and nothing is left of it
    assert third.path == numbered(target, 2) and reserve(target, run).path == numbered(target, 2)
    (directory / "rank0.3.pt.trace.json.gz.partial").write_bytes(b"a killed writer's")
    assert reserve(target, run).path == numbered(target, 4)  # what a killed writer left keeps its name taken
    assert target.read_bytes() == b"first" and numbered(target, 1).read_bytes() == b"second"


def test_a_link_at_the_reserved_name_or_its_partial_is_refused(save_path, victim):
    run = save_path / "run"
    directory = ensure_dir(run / "step1", run)
    (directory / "t.json").symlink_to(victim / "precious.txt")
    (directory / "u.json.partial").symlink_to(victim / "precious.txt")
    for name in ("t.json", "u.json"):
        with pytest.raises(UnsafePathError):
            reserve(directory / name, run)
    assert sorted(os.listdir(directory)) == ["t.json", "u.json.partial"]  # no claim left behind
    assert (victim / "precious.txt").read_text() == "the user's data\n"


def test_writers_racing_for_one_name_each_keep_their_file(save_path):
    """Threads of one process and two processes reserve, write and place the same name at once, in every
    order the scheduler picks: every file is kept whole under a name of its own."""
    import threading

    run = save_path / "run"
    target = ensure_dir(run / "step1" / "rank0-h-1" / "torch", run) / "rank0.pt.trace.json.gz"
    script = ("import sys; from pathlib import Path; from rlprof.layout import reserve\n"
              "for i in range(50):\n"
              "    r = reserve(Path(sys.argv[1]), Path(sys.argv[2])); r.handle.write(f'{sys.argv[3]}-{i}'.encode()); r.place()\n")
    others = [subprocess.Popen([sys.executable, "-c", script, str(target), str(run), f"process{p}"]) for p in range(2)]
    start = threading.Barrier(4)
    failures = []

    def writer(name):
        try:
            start.wait()
            for i in range(50):
                reserved = reserve(target, run)
                reserved.handle.write(f"{name}-{i}".encode())
                reserved.place()
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            failures.append(exc)

    threads = [threading.Thread(target=writer, args=(f"thread{t}",)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.wait(60) for p in others] == [0, 0] and failures == []
    contents = sorted(p.read_text() for p in target.parent.iterdir())
    assert contents == sorted(f"{who}-{i}" for who in ("thread0", "thread1", "thread2", "thread3", "process0",
                                                       "process1") for i in range(50))


def test_write_reserved_places_whole_files_or_nothing(save_path):
    run = save_path / "run"
    target = run / "step1" / "rank0.memory_snapshot.pickle"
    with write_reserved(target, run) as first:
        first.handle.write(b"one")
    with pytest.raises(RuntimeError):
        with write_reserved(target, run) as failed:
            failed.handle.write(b"half")
            raise RuntimeError("CUDA error")
    with write_reserved(target, run) as second:
        second.handle.write(b"two")
    assert (first.path, second.path) == (target, numbered(target, 1))
    assert sorted(os.listdir(target.parent)) == sorted([target.name, numbered(target, 1).name])
    assert target.read_bytes() == b"one" and numbered(target, 1).read_bytes() == b"two"


def test_place_reserved_keeps_every_file_moved_in(save_path, tmp_path):
    run = save_path / "run"
    target = run / "step1" / "replica0.rank0.profiler_out.txt"
    placed = []
    for n in range(3):
        source = tmp_path / f"engine{n}.txt"
        source.write_text(f"engine {n}")
        placed.append(place_reserved(source, target, run))
    assert placed == [target, numbered(target, 1), numbered(target, 2)]
    assert [p.read_text() for p in placed] == ["engine 0", "engine 1", "engine 2"]
    assert sorted(os.listdir(target.parent)) == sorted(p.name for p in placed)


def test_scratch_dir_is_private_reused_and_removed(save_path):
    run = save_path / "run"
    directory = run / "step1" / "rank0-h-1" / "torch"
    scratch = ScratchDir(directory, run)
    assert scratch.path.parent == directory and stat.S_IMODE(scratch.path.stat().st_mode) == 0o700
    for step in (1, 2):  # one directory for every file the tool writes
        scratch.path_for("trace.json").write_text(f"step {step}")  # the tool, writing by path
        assert (scratch.path / "trace.json").read_text() == f"step {step}"
        scratch.remove("trace.json")
        assert os.listdir(scratch.path) == []
    scratch.path_for("left.json").write_text("a tool's leftover")
    scratch.close()
    scratch.close()  # idempotent
    assert os.listdir(directory) == []
    with pytest.raises(ValueError):
        scratch.path_for("late.json")


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc: elsewhere a swapped directory is refused")
def test_scratch_dir_swapped_for_a_link_is_not_followed(save_path, victim):
    run = save_path / "run"
    scratch = ScratchDir(ensure_dir(run / "step1" / "rank0-h-1" / "torch", run), run)
    real = scratch.path.with_name("moved-away")
    scratch.path.rename(real)
    scratch.path.symlink_to(victim, target_is_directory=True)  # planted where the scratch directory was
    scratch.path_for("precious.txt").write_text("overwritten?")
    assert (victim / "precious.txt").read_text() == "the user's data\n"
    assert sorted(os.listdir(victim)) == ["precious.txt"]
    assert (real / "precious.txt").read_text() == "overwritten?"  # written where rlprof made its directory
    scratch.close()
    assert sorted(os.listdir(victim)) == ["precious.txt"]


def test_scratch_dir_under_a_planted_link_is_refused(save_path, victim):
    run = save_path / "run"
    (run / "step1").mkdir(parents=True)
    (run / "step1" / "rank0-h-1").symlink_to(victim, target_is_directory=True)
    exc = attempt(lambda: ScratchDir(run / "step1" / "rank0-h-1" / "torch", run))
    assert exc.filename == str(run / "step1" / "rank0-h-1")
    assert sorted(os.listdir(victim)) == ["precious.txt"]


def test_place_copies_across_file_systems(save_path):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(save_path).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's temporary directory")
    source = Path(tempfile.mkdtemp(dir=shm)) / "worker_process_1.nsys-rep"
    try:
        source.write_bytes(b"report" * 1000)
        run = save_path / "run"
        placed = place(source, run / "step1" / "nsys" / source.name, run)
        assert placed.read_bytes() == source.read_bytes() and placed.stat().st_nlink == 1
        with pytest.raises(FileExistsError):
            place(source, placed, run)
    finally:
        shutil.rmtree(source.parent)


def test_footprint_sees_layout_writes_at_their_real_paths(tmp_path, monkeypatch):
    """rlprof.testing's footprint audit must attribute layout's descriptor-relative mkdir/open to the
    absolute path (an open audit event carries only the relative name), so a write outside the
    allowed roots is still caught and one inside is not misread as a write in the working directory."""
    from rlprof.testing.footprint import Footprint

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    run, elsewhere = tmp_path / "save" / "run", tmp_path / "elsewhere" / "run"
    run.parent.mkdir()
    elsewhere.parent.mkdir()
    with Footprint(run_dir=run, allowed=[], watched={"the working directory": cwd}) as footprint:
        with open_file(run / "step1" / "rank0-h-1" / "torch" / "t.json", run) as handle:
            handle.write("inside")
        with open_file(elsewhere / "x" / "t.json", elsewhere, "a") as handle:
            handle.write("outside")
    assert footprint.writes_outside == [
        f"created the directory {tmp_path / 'elsewhere' / 'run'}",
        f"created the directory {elsewhere / 'x'}",
        f"opened for writing {elsewhere / 'x' / 't.json'}",
    ]
    assert footprint.appeared == []
