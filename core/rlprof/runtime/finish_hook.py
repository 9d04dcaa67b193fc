"""verl's ``finish_hook_cmd``: a user command run once after the last profiled step.

Runs on ``finish_hook_ranks``, or every rank with ``finish_hook_all_ranks``, or by default on the
ranks that profile. The command string is run by ``/bin/sh -c`` exactly as the user wrote it; the run
context reaches it **only** through environment variables, never pasted into the string:

``RLPROF_SAVE_PATH``, ``RLPROF_RUN_DIR``, ``RLPROF_RUN_ID``, ``RLPROF_TOOL`` (comma list),
``RLPROF_RANK``, ``RLPROF_WORLD_SIZE``, ``RLPROF_PID`` (the training process), ``RLPROF_ROLE``
(comma list of this process's hosted roles, the selected ones when it profiles), ``RLPROF_STEPS``
(comma list), and verl's names for the same things, so a command written for verl runs unchanged:
``VERL_PROFILE_SAVE_PATH``, ``VERL_PROFILE_TOOL``, ``VERL_PROFILE_RANK``, ``VERL_PROFILE_PID``,
``VERL_PROFILE_ROLE`` and, with nsys, ``VERL_PROFILE_RAY_NSIGHT_DIR`` (Ray's nsight report directory,
``$RLPROF_RAY_NSIGHT_DIR`` or Ray's default ``/tmp/ray/session_latest/logs/nsight``).

The command's output goes to a file, ``<run_dir>/_process/rank<R>-<host>-<pid>/finish_hook.log``
(created new, never through a link), and while the command's shell runs each new line is also printed
to the process's stdout (in a Ray worker that is the worker's log, where a logger may not be
configured), prefixed ``[rlprof finish_hook] rank N:``; the exit status is printed and logged too. A
failing or missing command never raises.

The command is done when its shell exits. A job it started in the background
(``upload.sh "$RLPROF_SAVE_PATH" &``) keeps running, in its own session, so the end of training
does not stop it; what it prints later is in the log file only. (Reading the command's output from a
pipe would wait for every holder of the pipe, that background job included, to close it.)

When it runs:

* steps from ``global_profiler.steps``: after the last one, in a background thread, so training goes
  on; ``finalize()`` waits for it (at most :func:`wait_limit_s` seconds: ``RLPROF_FINISH_HOOK_TIMEOUT``,
  default 600);
* steps decided by the caller (verl's trainer calls ``stop_profile(run_command=True)`` on its last
  profiled step): then and there, synchronously, as verl does — the step returns when the command
  has finished (typically an upload of ``$VERL_PROFILE_SAVE_PATH`` that must be complete before the
  job ends).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from rlprof.env_seconds import seconds_or_default
from rlprof.layout import open_file, process_tag

log = logging.getLogger("rlprof")
TIMEOUT_ENV = "RLPROF_FINISH_HOOK_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0
RAY_NSIGHT_DIR = "/tmp/ray/session_latest/logs/nsight"
"""Where Ray's nsight runtime_env writes reports on each node (Ray's default session directory)."""


class FinishHook:
    POLL_S = 0.05
    """How often the command's log is read for new lines while its shell runs."""

    def __init__(self, command: str, last_step: int | None, env: dict[str, str], *, synchronous: bool = False,
                 log_path: Path | None = None, run_dir: Path | None = None):
        self.command = command
        self.last_step = last_step
        self.env = env
        self.log_path = log_path
        """Where the command's output goes (None: nowhere but stdout, e.g. in tests of the rules)."""
        self.run_dir = run_dir
        self.synchronous = synchronous
        """Run in the calling thread (verl's semantics) instead of a background thread."""
        self.thread: threading.Thread | None = None
        self.started = False
        self.returncode: int | None = None

    @classmethod
    def for_process(cls, config, plan, run) -> "FinishHook | None":
        g = config.global_
        if not g.finish_hook_cmd or not (g.steps or g.caller_steps) or not g.tools:
            return None
        if g.finish_hook_all_ranks:
            chosen = True
        elif g.finish_hook_ranks is not None:
            chosen = run.rank in g.finish_hook_ranks
        else:
            chosen = plan.active
        if not chosen:
            return None
        roles = plan.selected_roles or tuple(run.roles)
        save_path = str(Path(g.save_path).absolute())
        env = {
            "RLPROF_SAVE_PATH": save_path,
            "RLPROF_RUN_DIR": str(run.run_dir),
            "RLPROF_RUN_ID": run.run_id,
            "RLPROF_TOOL": ",".join(g.tools),
            "RLPROF_RANK": str(run.rank),
            "RLPROF_WORLD_SIZE": str(run.world_size),
            "RLPROF_PID": str(run.pid),
            "RLPROF_ROLE": ",".join(roles),
            "RLPROF_STEPS": ",".join(str(s) for s in g.steps or ()),
            "VERL_PROFILE_SAVE_PATH": save_path,
            "VERL_PROFILE_TOOL": ",".join(g.tools),
            "VERL_PROFILE_RANK": str(run.rank),
            "VERL_PROFILE_PID": str(run.pid),
            "VERL_PROFILE_ROLE": ",".join(roles),
        }
        if "nsys" in g.tools:
            env["VERL_PROFILE_RAY_NSIGHT_DIR"] = os.environ.get("RLPROF_RAY_NSIGHT_DIR", RAY_NSIGHT_DIR)
        log_path = run.run_dir / "_process" / process_tag(run.rank, run.host, run.pid) / "finish_hook.log"
        return cls(g.finish_hook_cmd, max(g.steps) if g.steps else None, env, synchronous=g.caller_steps,
                   log_path=log_path, run_dir=run.run_dir)

    def step_done(self, step: int) -> None:
        """Called at every step boundary, after the backends wrote the step: starts the command
        after the last profiled step."""
        if step == self.last_step:
            self.start()

    def start(self) -> None:
        """Run the command once: now (``synchronous``) or in a background thread."""
        if self.started:
            return
        self.started = True
        if self.synchronous:
            self._run()
            return
        self.thread = threading.Thread(target=self._run, name="rlprof-finish-hook", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        rank = self.env["RLPROF_RANK"]
        log.info("rlprof: running finish_hook_cmd on rank %s: %s", rank, self.command)
        say(rank, f"running {self.command}")
        try:
            output = self._open_log()
        except Exception as exc:  # an unwritable run directory must not cost the user their upload
            say(rank, f"cannot write the command's log ({exc}); its output is not kept")
            output = None
        try:
            with open(os.devnull, "wb") if output is None else output as sink:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", self.command],
                    env={**os.environ, **self.env},
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # a background job it starts outlives the trainer's process group
                )
            self.returncode = self._follow(proc, rank) if output is not None else proc.wait()
        except Exception as exc:  # the hook must never stop training
            say(rank, f"command failed to launch: {exc}")
            log.error("rlprof: finish_hook_cmd could not run: %s", exc)
            self.returncode = -1
            return
        say(rank, f"command exited with {self.returncode}")
        if self.returncode:
            log.error("rlprof: finish_hook_cmd exited with status %s on rank %s", self.returncode, rank)
        else:
            log.info("rlprof: finish_hook_cmd exited with status 0 on rank %s", rank)

    def _open_log(self) -> IO[bytes] | None:
        if self.log_path is None or self.run_dir is None:
            return None
        return open_file(self.log_path, self.run_dir, "wb")

    def _follow(self, proc: subprocess.Popen, rank: str) -> int:
        """Print the log's new lines while the command's shell runs; its exit status once it exits
        (not once its background jobs do)."""
        with os.fdopen(os.open(self.log_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as reader:
            pending = b""
            while True:
                status = proc.poll()
                pending += reader.read()
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    say(rank, line.decode("utf-8", "replace").rstrip())
                if status is not None:
                    if pending:
                        say(rank, pending.decode("utf-8", "replace").rstrip())
                    return status
                time.sleep(self.POLL_S)

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join(wait_limit_s())


def wait_limit_s() -> float:
    """How long ``finalize`` waits for the finish hook, in seconds: ``RLPROF_FINISH_HOOK_TIMEOUT``,
    default 600. Read here only (the Ray controller asks too). A value that is not a number of
    seconds >= 0 is said once, naming the variable, the value and what is allowed, and the default
    is used: a typo in an environment variable must not raise out of ``finalize`` (it runs at exit)."""
    return seconds_or_default(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, "a number of seconds >= 0 (how long finalize "
                              "waits for the finish hook)", minimum=0, logger=log)


def say(rank: object, text: str) -> None:
    """One line of the finish hook's report on stdout (see the module doc)."""
    print(f"[rlprof finish_hook] rank {rank}: {text}", flush=True)
