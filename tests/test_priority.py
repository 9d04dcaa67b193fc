"""rlprof's helper processes (a trace analysed beside training) run at the lowest priority the system grants,
in a CPU group of their own, and die with the process that started them (rlprof.priority)."""

from __future__ import annotations

import pytest
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlprof.priority import SPAWN

REPORT = """
import json, os
from rlprof.priority import lowest
lowest()
group = open("/proc/self/autogroup").read().split() if os.path.exists("/proc/self/autogroup") else None
print(json.dumps({"nice": os.nice(0), "policy": os.sched_getscheduler(0), "session": os.getsid(0), "pid": os.getpid(),
                  "group": group}))
"""


def test_a_helper_runs_idle_at_nice_19_in_a_session_and_cpu_group_of_its_own():
    done = subprocess.run([sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=60, **SPAWN)
    seen = json.loads(done.stdout)
    assert seen["nice"] == 19 and seen["policy"] == os.SCHED_IDLE
    assert seen["session"] == seen["pid"] != os.getsid(0)  # its own session: not ranked against ours as an equal
    if seen["group"] is not None:  # /proc/self/autogroup: "/autogroup-N nice 19"
        assert seen["group"][-2:] == ["nice", "19"], seen["group"]


PARENT = """
import subprocess, sys
from rlprof.priority import SPAWN
child = subprocess.Popen([sys.executable, "-c", "from rlprof.priority import lowest; lowest(); print('lowered', flush=True); "
                          "import time; time.sleep(120)"], stdout=subprocess.PIPE, text=True, **SPAWN)
assert child.stdout.readline() == "lowered\\n"  # the child has lowered itself (an event, not a guess at how long)
print(child.pid, flush=True)
"""


@pytest.mark.timing
def test_a_helper_dies_with_the_process_that_started_it():
    parent = subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True, timeout=60)
    pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 120  # waits for its death; the bound only ends a failing test
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
        if state == "Z":
            break
        time.sleep(0.1)
    alive = Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] not in ("Z", "X")
    assert not alive, f"the helper {pid} outlived its parent"


def test_a_helper_command_is_lowered_before_its_module_is_imported(tmp_path):
    """``command(module)``: the module (an analysis with heavy imports) first runs already at the lowest priority."""
    from rlprof.priority import command

    (tmp_path / "probe_module.py").write_text(
        "import json, os, sys\n"
        "print(json.dumps({'nice': os.nice(0), 'policy': os.sched_getscheduler(0), 'argv': sys.argv[1:],"
        " 'main': __name__ == '__main__'}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command("probe_module", "--roles", "actor"), capture_output=True, text=True, timeout=60,
                          env=env, **SPAWN)
    seen = json.loads(done.stdout)
    assert seen == {"nice": 19, "policy": os.SCHED_IDLE, "argv": ["--roles", "actor"], "main": True}, done.stderr
