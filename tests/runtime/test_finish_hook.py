"""``finish_hook_cmd`` that starts a background job (``upload.sh "$RLPROF_SAVE_PATH" &``): the command is
done when its shell exits, so ``finalize()`` returns then; the job keeps running and its output goes
to the hook's log file."""

from __future__ import annotations

import time

import pytest

import rlprof
from rlprof.manifest import read_records


def profiler(save_path, command):
    return rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), run_id="bg", overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
        f"global_profiler.finish_hook_cmd='{command}'", "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.all_ranks=true"])


@pytest.mark.timing
def test_backgrounded_finish_hook_does_not_hold_finalize(test_backends, save_path, tmp_path, capfd):
    """The background job waits for a gate the test opens only after ``finalize()`` returned (at most about a
    minute): finalize cannot have waited for it, however busy the machine (before, a 1 s job and a 2 s bound)."""
    import threading

    gate = tmp_path / "gate"
    command = (f'(for i in $(seq 1200); do [ -e {gate} ] && break; sleep 0.05; done; echo late; '
               'echo uploaded > "$RLPROF_RUN_DIR/uploaded.txt") & echo started "$RLPROF_RANK"')
    prof = profiler(save_path, command)
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()  # the last profiled step: the hook starts here, in the background
    finalizing = threading.Thread(target=prof.finalize)
    finalizing.start()
    finalizing.join(50)  # only a finalize that waits for the job (up to a minute) runs into this bound
    assert not finalizing.is_alive(), "finalize() waited for the hook's background job"
    run_dir = save_path / "bg"
    assert not (run_dir / "uploaded.txt").exists()  # the job was still running when finalize() returned
    gate.touch()
    assert prof._finish.returncode == 0
    out = capfd.readouterr().out
    assert "[rlprof finish_hook] rank 0: started 0" in out
    assert "[rlprof finish_hook] rank 0: command exited with 0" in out
    # training's own records are complete
    records = list(read_records([save_path]))
    assert [r["step"] for r in records if r["type"] == "step"] == [1]
    assert [r["backend"] for r in records if r["type"] == "artifact"] == ["recorder"]
    assert any(r["type"] == "finalized" for r in records)
    # the background job went on after finalize(); what it printed later is in the hook's log
    logs = list(run_dir.glob("_process/rank0-*/finish_hook.log"))
    assert len(logs) == 1
    deadline = time.monotonic() + 120  # waits for the job's last line; the bound only ends a failing test
    while "late" not in logs[0].read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 120
    uploaded = run_dir / "uploaded.txt"
    while not (uploaded.exists() and uploaded.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uploaded.read_text() == "uploaded\n"
    assert logs[0].read_text().splitlines()[:2] == ["started 0", "late"]


def test_finish_hook_output_kept_when_the_run_directory_cannot_hold_its_log(test_backends, save_path, capfd):
    """A log that cannot be written (here: planted as a directory) never costs the user the command."""
    prof = profiler(save_path, 'echo ran > "$RLPROF_SAVE_PATH/ran.txt"')
    for log_dir in [prof._finish.log_path]:
        log_dir.mkdir(parents=True)  # a directory where the log file should go
    prof.start_step(1)
    prof.step_boundary()
    prof.finalize()
    assert (save_path / "ran.txt").read_text() == "ran\n"
    out = capfd.readouterr().out
    assert "cannot write the command's log" in out and "command exited with 0" in out


def test_a_bad_finish_hook_timeout_is_named_and_the_default_used(test_backends, save_path, monkeypatch, caplog):
    """``RLPROF_FINISH_HOOK_TIMEOUT=ten``: finalize still waits for the hook (600 s at most) and one
    warning names the variable, the value and what is allowed; nothing raises out of finalize."""
    from rlprof import notices

    notices.forget()
    monkeypatch.setenv("RLPROF_FINISH_HOOK_TIMEOUT", "ten")
    prof = profiler(save_path, 'echo ran > "$RLPROF_SAVE_PATH/ran.txt"')
    prof.start_step(1)
    prof.step_boundary()
    with caplog.at_level("WARNING", logger="rlprof"):
        prof.finalize()
    assert prof._finish.returncode == 0 and (save_path / "ran.txt").read_text() == "ran\n"
    [said] = [r.getMessage() for r in caplog.records if "RLPROF_FINISH_HOOK_TIMEOUT" in r.getMessage()]
    assert "'ten'" in said and "a number of seconds >= 0" in said and "600" in said
