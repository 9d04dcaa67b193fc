"""verl's ``finish_hook_cmd``: a user command run once after the last profiled step.

Runs on ``finish_hook_ranks``, or every rank with ``finish_hook_all_ranks``, or by default on the
ranks that profile. The command string is run by ``/bin/sh -c`` exactly as the user wrote it; the run
context reaches it **only** through environment variables, never pasted into the string:

``RLPROF_SAVE_PATH``, ``RLPROF_RUN_DIR``, ``RLPROF_RUN_ID``, ``RLPROF_TOOL`` (comma list),
``RLPROF_RANK``, ``RLPROF_WORLD_SIZE``, ``RLPROF_PID`` (the training process), ``RLPROF_ROLE``
(comma list of this process's selected roles), ``RLPROF_STEPS`` (comma list).

It runs in a background thread with its output streamed to the ``rlprof`` logger line by line, so
training continues; a failing or missing command is logged and never raises. ``finalize()`` waits for
it (at most ``RLPROF_FINISH_HOOK_TIMEOUT`` seconds, default 600).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from pathlib import Path

log = logging.getLogger("rlprof")


class FinishHook:
    def __init__(self, command: str, last_step: int, env: dict[str, str]):
        self.command = command
        self.last_step = last_step
        self.env = env
        self.thread: threading.Thread | None = None
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
        env = {
            "RLPROF_SAVE_PATH": str(Path(g.save_path).absolute()),
            "RLPROF_RUN_DIR": str(run.run_dir),
            "RLPROF_RUN_ID": run.run_id,
            "RLPROF_TOOL": ",".join(g.tools),
            "RLPROF_RANK": str(run.rank),
            "RLPROF_WORLD_SIZE": str(run.world_size),
            "RLPROF_PID": str(run.pid),
            "RLPROF_ROLE": ",".join(plan.selected_roles),
            "RLPROF_STEPS": ",".join(str(s) for s in g.steps or ()),
        }
        return cls(g.finish_hook_cmd, max(g.steps) if g.steps else None, env)

    def step_done(self, step: int) -> None:
        """Called at every step boundary, after the backends wrote the step: starts the command
        after the last profiled step."""
        if step == self.last_step:
            self.start()

    def start(self) -> None:
        """Run the command in the background, once."""
        if self.thread is not None:
            return
        self.thread = threading.Thread(target=self._run, name="rlprof-finish-hook", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        log.info("rlprof: running finish_hook_cmd on rank %s: %s", self.env["RLPROF_RANK"], self.command)
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
                log.info("rlprof finish_hook[rank %s]: %s", self.env["RLPROF_RANK"], line.rstrip())
            self.returncode = proc.wait()
        except Exception as exc:  # the hook must never stop training
            log.error("rlprof: finish_hook_cmd could not run: %s", exc)
            self.returncode = -1
            return
        if self.returncode:
            log.error("rlprof: finish_hook_cmd exited with status %s on rank %s", self.returncode, self.env["RLPROF_RANK"])

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join(float(os.environ.get("RLPROF_FINISH_HOOK_TIMEOUT", "600")))
