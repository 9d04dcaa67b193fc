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

The command's output and its exit status are printed to the process's stdout line by line (in a
Ray worker that is the worker's log, where a logger may not be configured), each line prefixed
``[rlprof finish_hook] rank N:``; the status is logged too. A failing or missing command never raises.

When it runs:

* steps from ``global_profiler.steps``: after the last one, in a background thread, so training goes
  on; ``finalize()`` waits for it (at most ``RLPROF_FINISH_HOOK_TIMEOUT`` seconds, default 600);
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
from pathlib import Path

log = logging.getLogger("rlprof")
RAY_NSIGHT_DIR = "/tmp/ray/session_latest/logs/nsight"
"""Where Ray's nsight runtime_env writes reports on each node (Ray's default session directory)."""


class FinishHook:
    def __init__(self, command: str, last_step: int | None, env: dict[str, str], *, synchronous: bool = False):
        self.command = command
        self.last_step = last_step
        self.env = env
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
        return cls(g.finish_hook_cmd, max(g.steps) if g.steps else None, env, synchronous=g.caller_steps)

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
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.command],
                env={**os.environ, **self.env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            for line in proc.stdout:
                say(rank, line.rstrip())
            self.returncode = proc.wait()
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

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join(float(os.environ.get("RLPROF_FINISH_HOOK_TIMEOUT", "600")))


def say(rank: object, text: str) -> None:
    """One line of the finish hook's report on stdout (see the module doc)."""
    print(f"[rlprof finish_hook] rank {rank}: {text}", flush=True)
