"""The ``pyspy`` backend: a py-spy recording of the training process per capture, as a subprocess.

py-spy (https://github.com/benfred/py-spy) is a sampling profiler for Python that runs as its own
process and reads the target's memory. This backend starts ``py-spy record --pid <this process>``
when a capture opens and stops it with SIGINT when the capture closes (py-spy writes its profile
when interrupted); the profile lands in the capture's ``ctx.output_dir()`` as
``profile.speedscope.json`` (open it at https://www.speedscope.app), beside ``py-spy.log`` (the
tool's own output).

What a subprocess backend has to get right, and where this one does it:

* **the signal mask** (:func:`_start_unblocked`): Ray runs actor methods on threads that block
  SIGINT, SIGTERM and SIGCHLD, and a child inherits the mask of the thread that started it. A
  py-spy started there never sees the SIGINT that stops it. The mask is lifted for the start only,
  on the calling thread, so the child starts with those signals deliverable;
* **its own process group** (``process_group=0``): a Ctrl-C in the terminal goes to the whole
  foreground group; py-spy must stop when the capture closes, not when the user interrupts the
  trainer (the core then still closes the capture and stops it the ordinary way);
* **waiting until it samples** (:meth:`_Recording.wait_ready`): py-spy needs some tens of milliseconds
  to attach; interrupted before, it dies with nothing written. The open waits for its ready line, so
  a short region is still sampled (that wait is hook time: "(outside regions)" in the report);
* **stopping by signal, with a limit** (:meth:`_Recording.stop`): SIGINT, wait ``stop_timeout_s``,
  then kill, so a stuck tool never holds training; what went wrong becomes ``ctx.skip`` (this
  capture has no profile, and why) and ``ctx.warn``;
* **state across hooks**: one :class:`_Recording` per open capture, started in one hook and stopped
  in another, keyed by the capture id; ``finalize`` stops anything still running.

tool_config (``global_tool_config.pyspy`` or a role's ``tool_config.pyspy``)::

    rate: 100            # samples per second
    native: false        # also sample native (C/C++) frames
    stop_timeout_s: 10   # how long to wait for py-spy to write its profile after SIGINT
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import rlprof
from rlprof.errors import fail
from rlprof.backend_api import check_keys, parse_bool

PROFILE_FILE = "profile.speedscope.json"
LOG_FILE = "py-spy.log"
OPTIONS = ("rate", "native", "stop_timeout_s")
READY_LINE = "Control-C to exit"
"""What py-spy prints once it has attached and samples; until then a SIGINT kills it with nothing written."""
READY_TIMEOUT_S = 2.0
"""How long a capture's open waits for py-spy to attach (typically 20-50 ms)."""
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGCHLD})
"""What Ray's actor threads block; unblocked for the child's start (SIGCHLD: so the child's own
children, if any, are reaped normally)."""

log = logging.getLogger("rlprof.pyspy")


def find_py_spy() -> str | None:
    """The ``py-spy`` executable: beside this Python (a virtualenv's bin), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def _start_unblocked(command: list[str], log_path: Path, unblock: bool = True) -> subprocess.Popen:
    """Start ``command`` in its own process group with :data:`STOP_SIGNALS` deliverable in the child.

    The mask is per thread and the child inherits the starting thread's (CPython's subprocess sets
    the child's mask to the caller's), so it is lifted around the start and put back right after;
    ``preexec_fn`` would do it in the child but is unsafe in a process with threads (Ray's workers)."""
    previous = signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS) if unblock else None
    try:
        with open(log_path, "ab") as output:
            return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                    process_group=0, close_fds=True)
    finally:
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Recording:
    """One py-spy process recording one capture."""

    def __init__(self, process: subprocess.Popen, directory: Path):
        self.process = process
        self.directory = directory

    @property
    def profile(self) -> Path:
        return self.directory / PROFILE_FILE

    @property
    def log(self) -> Path:
        return self.directory / LOG_FILE

    def wait_ready(self, timeout_s: float) -> str | None:
        """Wait until py-spy says it samples; None when it does, else why not (it exited, or is slow)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if READY_LINE in self.log.read_text(errors="replace"):
                    return None
            except OSError:
                pass
            if self.process.poll() is not None:
                return f"py-spy exited with status {self.process.returncode} before sampling: {self._log_tail()}"
            time.sleep(0.005)
        return f"py-spy had not started sampling after {timeout_s:g} s; the start of this capture is not sampled"

    def stop(self, timeout_s: float) -> str | None:
        """Interrupt py-spy and wait for it to write the profile; None when it did, else why not."""
        process = self.process
        if process.poll() is None:
            try:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                return (f"py-spy did not stop within {timeout_s:g} s of SIGINT and was killed (is SIGINT blocked "
                        f"in it? see {self.log})")
        if self.profile.is_file() and self.profile.stat().st_size > 0:
            return None
        return f"py-spy exited with status {process.returncode} and wrote no profile: {self._log_tail()}"

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no output)"
        return " | ".join(lines[-3:]) or "(no output)"


class PySpyBackend:
    """Instantiated once per process session by the core (no arguments)."""

    rlprof_contract = 1
    """The rlprof hook contract this backend is written for (docs/migration.md)."""

    unblock_signals = True
    """Lift Ray's blocked signals for py-spy's start (:func:`_start_unblocked`). A subclass that sets it
    False is the bug this backend avoids: its conformance test shows the kit catching it."""

    def __init__(self) -> None:
        self._running: dict[str, _Recording] = {}
        """Capture id -> the py-spy recording it, started by one hook and stopped by another."""

    # ------------------------------------------------------------------ checks

    @rlprof.hookimpl
    def validate_tool_config(self, tool_config, key_path):
        check_keys(tool_config, key_path, OPTIONS)
        rate = tool_config.get("rate", 100)
        if isinstance(rate, bool) or not isinstance(rate, int) or not 1 <= rate <= 10_000:
            raise fail(f"{key_path}.rate", rate, "a whole number of samples per second from 1 to 10000")
        timeout = tool_config.get("stop_timeout_s", 10)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise fail(f"{key_path}.stop_timeout_s", timeout, "seconds, more than 0 and at most 600")
        return {"rate": rate, "native": parse_bool(tool_config.get("native"), f"{key_path}.native"),
                "stop_timeout_s": float(timeout)}

    @rlprof.hookimpl
    def check_environment(self):
        if find_py_spy() is None:
            return ["py-spy is not installed (pip install py-spy): its captures are skipped"]
        return []

    # ------------------------------------------------------------------ captures

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self._start(ctx)

    @rlprof.hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            self._start(ctx)

    @rlprof.hookimpl
    def stop_role(self, ctx):
        if ctx.closes_capture:
            return self._stop(ctx)

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            return self._stop(ctx)

    @rlprof.hookimpl
    def finalize(self, ctx):
        """Stop what is still running (a hook of ours that failed half-way); harmless when called again."""
        written = []
        for capture_id in list(self._running):
            written += self._stop(ctx, capture_id) or []
        return written or None

    def open_captures(self) -> list[str]:
        """Captures with a py-spy still running (the conformance suite's leak check asks)."""
        return list(self._running)

    def _start(self, ctx) -> None:
        executable = find_py_spy()
        if executable is None:
            ctx.skip("py-spy is not installed (pip install py-spy)")
            return
        directory = ctx.output_dir()
        config = ctx.tool_config
        command = [executable, "record", "--pid", str(os.getpid()), "--rate", str(config.get("rate", 100)),
                   "--format", "speedscope", "--output", str(directory / PROFILE_FILE), "--nonblocking"]
        if config.get("native"):
            command.append("--native")
        try:
            process = _start_unblocked(command, directory / LOG_FILE, self.unblock_signals)
        except OSError as exc:
            (directory / LOG_FILE).unlink(missing_ok=True)  # nothing was started: leave no empty file behind
            ctx.skip(f"py-spy could not be started: {type(exc).__name__}: {exc}")
            return
        recording = self._running[ctx.capture.capture_id] = _Recording(process, directory)
        late = recording.wait_ready(READY_TIMEOUT_S)
        if late is not None and process.poll() is None:
            ctx.warn(late)  # still running: it samples what it can; a process that exited is said at the close
        log.debug("rlprof: py-spy pid %d records capture %s", process.pid, ctx.capture.capture_id)

    def _stop(self, ctx, capture_id: str | None = None) -> list[Path] | None:
        capture_id = capture_id or ctx.capture.capture_id
        recording = self._running.pop(capture_id, None)
        if recording is None:
            return None  # never started (py-spy missing): skipped at the open already
        problem = recording.stop(float(ctx.tool_config.get("stop_timeout_s", 10)))
        written = [p for p in (recording.profile, recording.log) if p.is_file() and p.stat().st_size]
        if recording.log not in written:
            recording.log.unlink(missing_ok=True)  # py-spy said nothing: no empty file left behind
        for path in written:
            ctx.add_artifact(path, capture=capture_id)
        if problem is not None:
            ctx.warn(problem)
            ctx.skip(problem)
        return None
