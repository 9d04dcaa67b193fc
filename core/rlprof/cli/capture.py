"""``rlprof capture RUN [--steps N]``: ask a running job to capture its next N steps (issue 42).

``RUN`` is a run directory, or a ``save_path`` whose newest running run is meant. The request is a file in
the run's ``requests/`` directory on the driver's node (the Ray controller's, verl's trainer's, a plain
Profiler's rank 0); the driver reads it at its next step start, picks the steps every selected process will
capture (:class:`rlprof.runtime.unplanned.Decider`) and answers; this command prints that answer and returns.
The job captures with its configured tool, roles and ranks, and each capture's record says
``requested: <id>``. A tool that cannot start mid-run (nsys without its launch) refuses with the reason.

Exit status: 0 the steps were granted; 1 refused, or no answer within ``--wait`` seconds (the request stays:
the driver answers it at its next step start); 2 no armed running run there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlprof.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from rlprof.runtime.capture_requests import answer, listening, request, running_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlprof capture", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", metavar="RUN", help="a run directory, or a save_path (its newest running run)")
    parser.add_argument("--steps", type=int, default=1, metavar="N", help="how many steps to capture (default 1)")
    parser.add_argument("--wait", type=float, default=300.0, metavar="S",
                        help="how long to wait for the job's answer, seconds (default 300: it answers at a step start)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps: got {args.steps}; allowed: an integer >= 1")
    run_dir, why = running_run(Path(args.run))
    if run_dir is None:
        print(f"rlprof capture: {why}", file=sys.stderr)
        return EXIT_INVALID
    refused = listening(run_dir).get("refuse")
    if refused:
        print(f"rlprof capture: run {run_dir.name} refuses captures mid-run: {refused}", file=sys.stderr)
        return EXIT_FAILED
    request_id = request(run_dir, args.steps)
    print(f"asked run {run_dir.name} to capture its next {args.steps} step{'s' if args.steps > 1 else ''} "
          f"(request {request_id}); waiting for its next step start", file=sys.stderr)
    got = answer(run_dir, request_id, args.wait)
    if got is None:
        print(f"rlprof capture: no answer from run {run_dir.name} in {args.wait:g} s; the request stays and is "
              f"answered at the job's next step start", file=sys.stderr)
        return EXIT_FAILED
    if got.get("refused"):
        print(f"rlprof capture: run {run_dir.name} refused request {request_id}: {got['refused']}", file=sys.stderr)
        return EXIT_FAILED
    steps = got["steps"]
    shown = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
    print(f"run {run_dir.name} will capture {shown} on every selected process (request {request_id}, asked at step "
          f"{got.get('asked_at_step')}); then: rlprof report {run_dir}")
    return EXIT_OK
