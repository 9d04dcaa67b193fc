"""A stand-in for the ``nsys`` CLI, for tests on machines without Nsight Systems.

``nsys profile [options] program...`` runs the program as a child process, as nsys does, appends
what it was asked to do (options, program, child pid) as a JSON line to ``$NSYS_STANDIN_LOG``, and,
once the child exited, writes one report per capture window it was told to expect
(``capture-range-end=repeat-shutdown:N``), named as nsys names them: ``<-o>.<k>.nsys-rep``, ``%p``
being the child's pid. Anything else (``nsys --version``...) just succeeds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def main(args: list[str]) -> int:
    if not args or args[0] != "profile":
        print("nsys stand-in")
        return 0
    options: dict[str, str] = {}
    i = 1
    while i < len(args) and args[i].startswith("-"):
        if args[i].startswith("--"):
            name, _, value = args[i][2:].partition("=")
            options[name] = value
            i += 1
        else:
            options[args[i][1:]] = args[i + 1]
            i += 2
    program = args[i:]
    child = subprocess.Popen(program)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _f: child.send_signal(s))
    code = child.wait()
    log = os.environ.get("NSYS_STANDIN_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"options": options, "program": program, "pid": child.pid, "code": code}) + "\n")
    end, output = options.get("capture-range-end", ""), options.get("o") or options.get("output")
    if output and end.startswith("repeat-shutdown:"):
        base = output.strip("'\"").replace("%p", str(child.pid))
        for k in range(1, int(end.split(":")[1]) + 1):
            with open(f"{base}.{k}.nsys-rep", "w") as handle:
                handle.write(f"report {k} of process {child.pid}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
