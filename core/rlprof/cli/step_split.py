"""``python -m rlprof.cli.step_split TRACE --roles actor,ref --steps 2``: the program a profiling process runs in a child.

Not a command a person types: :mod:`rlprof.runtime.split_analyser` starts it (by name, at the lowest
priority) for each trace the process writes, and reads the one JSON line it prints. What the figures
are, and the JSON's shape, is :mod:`rlprof.analysis.step_split`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rlprof.analysis.step_split import NotATrace, analyse
from rlprof.priority import lowest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlprof.cli.step_split",
                                     description="One trace's split per step and role region, as JSON (the step metrics).")
    parser.add_argument("trace", help="a trace file an installed reader reads")
    parser.add_argument("--roles", required=True, help="the process's roles, comma-separated (actor,ref)")
    parser.add_argument("--steps", default="", help="the capture's steps, comma-separated (a row of no step: the one step)")
    args = parser.parse_args(argv)
    lowest()  # beside training: only a core nothing else wants (rlprof.priority)
    roles = [r for r in args.roles.split(",") if r]
    try:
        steps = [int(s) for s in args.steps.split(",") if s]
        found = analyse(args.trace, roles, steps)
    except NotATrace as exc:
        print(json.dumps({"steps": {}, "skipped": str(exc)}))
        return 0
    except Exception as exc:  # one line for the caller's log, never a traceback
        reason = str(exc).splitlines()[0] if str(exc) else ""
        print(json.dumps({"error": f"{type(exc).__name__}: {reason}"[:300]}))
        return 1
    print(json.dumps({"steps": {str(step): [[role, region, figures] for (role, region), figures in sorted(regions.items())]
                                for step, regions in sorted(found.items())}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
