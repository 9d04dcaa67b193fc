"""rlprof's own helper processes (a trace analysed beside training) at the lowest CPU priority there is.

Why more than ``os.nice(19)``: Linux groups processes by session for CPU time (``sched_autogroup``, on in
most distributions' kernels). A nice value only ranks a process within its session's group, and each group
gets an equal share against the others: a nice-19 analysis started by a Ray actor competes with another
actor's work (a rollout replica generating, in its own session) as an equal. bench/bench_priority.py, on the
2-core VM: two busy processes kept 0.52 of their work beside a nice-19 child in another session, 0.96 beside
one in their own, and 0.94 beside a child made as here (medians of 3). (verl's CPU example, before this: the step after a
capture generated in 4.0 s against 2.0 s while the training worker's analysis of that capture ran.)

So a helper process is started in a session of its own (:data:`SPAWN`: ``start_new_session``, no
``preexec_fn``, which is unsafe in a process with threads) and, first thing, calls :func:`lowest`: its
session's group at nice 19 (``/proc/self/autogroup``), the process at nice 19 and ``SCHED_IDLE`` (it runs
only on a core nothing else wants), and killed with its parent (``PR_SET_PDEATHSIG``: a worker killed at
the end of a job leaves no analysis running). Each step that the system refuses is skipped: the helper
runs anyway.

A helper that must outlive its parent (a split finished after the run, :mod:`rlprof.analysis.late_split`) is
started :func:`detached`: not a child of the process that asks for it. Ray kills a worker's children when the
worker ends (``RAY_kill_child_processes_on_worker_exit``, on by default; a session of their own does not save them),
and verl's trainer runs in a Ray actor: a late split started as its child was killed at the job's end, its job file
left unfinished (tests/integrations/test_verl_trainer.py's e2e run).
"""

from __future__ import annotations

import os
import signal
import sys

SPAWN = {"start_new_session": True}
"""``subprocess`` arguments for a helper process: a session (and so a CPU group) of its own."""
NICE = 19
DETACH = ("/bin/sh", "-c", '"$@" &', "rlprof-detach")
"""A shell that starts its arguments in the background and ends at once: their parent is gone, so they are
nobody's child (:func:`detached`)."""
DETACH_WAIT_S = 10.0


def detached(argv: list[str]) -> None:
    """Start ``argv`` in a session of its own as an orphan (adopted by init), not a child of this process, so that
    ending this process's children does not end it (see the module doc). Waits only for the shell that starts it
    (a few ms).

    :raises OSError: the shell could not be started; :raises subprocess.CalledProcessError: it failed."""
    import subprocess

    subprocess.run([*DETACH, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   close_fds=True, check=True, timeout=DETACH_WAIT_S, **SPAWN)


def command(module: str, *args: str) -> list[str]:
    """The command line of a helper running ``python -m module args``, lowered (:func:`lowest`) before it imports
    anything of its work: only the interpreter's own start (tens of ms) runs at the caller's priority, not the
    analysis' imports (torch's reader, ijson: a tenth of a second and more)."""
    launch = (f"from rlprof.priority import lowest; lowest(); import runpy; "
              f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")
    return [sys.executable, "-c", launch, *args]


def lowest(outlive_parent: bool = False) -> None:
    """In the helper process, before its work: the lowest priority this system grants (see the module doc).
    ``outlive_parent``: not killed with its parent (a split finished after its process ended:
    :mod:`rlprof.analysis.late_split`, which ends by itself once its traces are read)."""
    try:
        with open("/proc/self/autogroup", "w", encoding="ascii") as group:  # this session's group, new with it
            group.write(str(NICE))
    except OSError:
        pass  # no autogroups here, or not allowed
    try:
        os.nice(NICE - os.nice(0))
    except OSError:
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    if outlive_parent:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        pass
