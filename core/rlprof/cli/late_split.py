"""``python -m rlprof.cli.late_split JOB``: the program a step's book starts for a split finished after the run.

Not a command a person types: :func:`rlprof.runtime.split_analyser.start_late` starts it (by name) in a session of
its own, not ended with the process that started it, for a step some of whose traces were still being analysed as
their processes ended. What it does is :mod:`rlprof.analysis.late_split`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from rlprof.analysis.late_split import run_job
from rlprof.priority import lowest


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m rlprof.cli.late_split JOB", file=sys.stderr)
        return 2
    lowest(outlive_parent=True)  # beside whatever runs now; it must outlive the process that started it
    try:
        run_job(Path(args[0]))
    except Exception as exc:  # one line, never a traceback: the report splits the traces itself
        print(f"rlprof: the late split of {Path(args[0]).name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
