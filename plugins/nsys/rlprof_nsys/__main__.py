"""``python -m rlprof_nsys``: the nsys backend's command line.

``relocate PATH... [--wait SECONDS]`` (also ``rlprof relocate``)
    Move the nsys reports that were still pending at finalize (see :mod:`rlprof_nsys.relocation`)
    from Ray's nsight directory into the run layout. Run it on each node after the profiled
    workers exited. Exit status 0 when nothing of this host is left waiting, 3 otherwise.
``controller-command [--config FILE] [KEY=VALUE...] -- COMMAND...``
    Print the ``nsys profile ...`` command that runs the driver under nsys with
    ``global_tool_config.nsys.controller_nsight_options``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from .launch import controller_command
from .relocation import relocate_pending


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlprof_nsys", description="rlprof's nsys backend tools")
    sub = parser.add_subparsers(dest="command", required=True)
    _relocate_arguments(sub.add_parser("relocate", help="move pending nsys reports into the run layout"))
    command = sub.add_parser("controller-command", help="print the nsys command that runs the driver")
    command.add_argument("--config", default=None, help="a YAML configuration (else overrides only)")
    command.add_argument("rest", nargs=argparse.REMAINDER, help="KEY=VALUE overrides, then -- and the driver command")
    args = parser.parse_args(argv)
    if args.command == "relocate":
        return _relocate(args)
    overrides, driver = _split(args.rest)
    print(shlex.join(controller_command(driver, args.config, overrides)))
    return 0


def relocate_command(argv: list[str]) -> int:
    """``rlprof relocate PATH... [--wait S]`` (the backend's ``cli_commands`` hook offers it)."""
    parser = argparse.ArgumentParser(prog="rlprof relocate", description="move pending nsys reports into the run layout "
                                     "(run on each node after the profiled workers exited)")
    _relocate_arguments(parser)
    return _relocate(parser.parse_args(argv))


def _relocate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="run directories or save paths")
    parser.add_argument("--wait", type=float, default=0.0, help="keep trying for this many seconds while reports are still being written")
    parser.add_argument("--settle", type=float, default=None,
                        help="seconds a report must be unmodified to count as complete, where /proc cannot tell whether nsys still writes it")


def _relocate(args) -> int:
    kwargs = {} if args.settle is None else {"settle_seconds": args.settle}
    deadline = time.monotonic() + args.wait
    while True:
        outcomes = relocate_pending(args.paths, **kwargs)
        waiting = [o for o in outcomes if o.status == "waiting"]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
    for outcome in outcomes:
        print(f"{outcome.status:<10} {outcome.source} -> {outcome.target}")
    if not outcomes:
        print("no pending nsys reports found")
    return 3 if waiting else 0


def _split(rest: list[str]) -> tuple[list[str], list[str]]:
    if "--" in rest:
        at = rest.index("--")
        return rest[:at], rest[at + 1:]
    return [], rest


if __name__ == "__main__":
    sys.exit(main())
