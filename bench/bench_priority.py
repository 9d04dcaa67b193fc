"""What a helper process of rlprof (a trace's analysis beside training) leaves of other processes' CPU.

Why: ``os.nice(19)`` ranks a process only within its session's CPU group (Linux ``sched_autogroup``); a
Ray actor's analysis child then takes a full share from another actor in another session (a rollout
replica generating). rlprof's helpers start in a session of their own and lower that group too
(:mod:`rlprof.priority`). Here two busy processes stand for training (as many as this machine has cores,
in this script's session); beside them, one busy child for 6 s, made three ways. Printed: the work the
busy processes did beside the child, as a share of what they did alone, median of ``--repeat`` runs.

Run: ``flock /tmp/rlprof-heavy.lock python bench/bench_priority.py`` (nothing else running).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

BUSY_S = 4.0
CHILD = """
import sys, time
if sys.argv[1] == "nice":
    import os; os.nice(19)
elif sys.argv[1] == "rlprof":
    from rlprof.priority import lowest; lowest()
began = time.time()
while time.time() - began < 6:
    pass
"""
WAYS = {"nice 19, in the busy processes' session": ("nice", {}),
        "nice 19, in a session of its own (a Ray actor's child beside another actor)": ("nice", {"start_new_session": True}),
        "rlprof.priority (SPAWN + lowest())": ("rlprof", "spawn")}


def busy() -> int:
    """Work done by as many busy processes as there are cores, for BUSY_S."""
    code = f"import time\nt = time.time(); n = 0\nwhile time.time() - t < {BUSY_S}: n += 1\nprint(n)"
    workers = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
               for _ in range(os.cpu_count() or 2)]
    return sum(int(w.communicate()[0]) for w in workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from rlprof.priority import SPAWN

    shares: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(args.repeat):
        for way, (mode, options) in WAYS.items():
            alone = busy()
            child = subprocess.Popen([sys.executable, "-c", CHILD, mode], **(SPAWN if options == "spawn" else options))
            time.sleep(0.5)  # the child's start
            beside = busy()
            child.wait()
            shares[way].append(beside / alone)
    for way, values in shares.items():
        print(f"{statistics.median(values):.2f} of the work kept beside a child made with {way} "
              f"(runs: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
