"""``finish_hook_cmd`` that starts a background job (``upload.sh "$RLPROF_SAVE_PATH" &``): the command is
done when its shell exits, so ``finalize()`` returns then; the job keeps running and its output goes
to the hook's log file."""

from __future__ import annotations

import time

import rlprof
from rlprof.manifest import read_records


def profiler(save_path, command):
    return rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), run_id="bg", overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
        f"global_profiler.finish_hook_cmd='{command}'", "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.all_ranks=true"])


def test_backgrounded_finish_hook_does_not_hold_finalize(test_backends, save_path, capfd):
    # the job outlives its shell by 20 s; a second job proves jobs go on running after finalize()
    command = ('sleep 20 & (sleep 1; echo late; echo uploaded > "$RLPROF_RUN_DIR/uploaded.txt") & '
               'echo started "$RLPROF_RANK"')
    prof = profiler(save_path, command)
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()  # the last profiled step: the hook starts here, in the background
    began = time.monotonic()
    prof.finalize()
    took = time.monotonic() - began
    assert took < 2.0, f"finalize() waited {took:.1f} s for the hook's background job"
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
    run_dir = save_path / "bg"
    deadline = time.monotonic() + 15
    while not (run_dir / "uploaded.txt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (run_dir / "uploaded.txt").read_text() == "uploaded\n"
    logs = list(run_dir.glob("_process/rank0-*/finish_hook.log"))
    assert len(logs) == 1
    deadline = time.monotonic() + 5
    while "late" not in logs[0].read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
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
