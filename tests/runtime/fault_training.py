"""A tiny training loop under rlprof, run as its own process by tests/runtime/test_fault_suite.py where a
fault is about process exit, signals or the disk (usage: ``python fault_training.py '<json>'``).

The JSON holds ``config`` (an rlprof config), ``run_id``, ``steps``, ``regions`` (``[[role, stage],
...]`` per step), ``iterations`` per region, ``finalize`` (call ``prof.finalize()`` at the end, default
true), ``fill`` (``{"step": N, "path": P}``: before step N another writer fills the disk by writing
P until it is full; ``{"step": N, "rlimit": true}``: before step N this process may no longer grow any
file — ``RLIMIT_FSIZE`` 0 with ``SIGXFSZ`` ignored, so every append fails with ``EFBIG`` as on a full
disk, the manifest's included). It prints ``TRAINING DONE`` after the last step: the fault did not stop training.
"""

from __future__ import annotations

import errno
import json
import resource
import signal
import sys

import rlprof


def fill_disk(path: str) -> None:
    chunk = b"x" * 65536
    with open(path, "wb", buffering=0) as handle:
        while True:
            try:
                handle.write(chunk)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EFBIG):
                    raise
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]


def main() -> int:
    spec = json.loads(sys.argv[1])
    roles = tuple(dict.fromkeys(role for role, _ in spec["regions"]))
    prof = rlprof.Profiler(spec["config"], rank=0, world_size=1, roles=roles, run_id=spec["run_id"])
    fill = spec.get("fill")
    for step in range(1, spec["steps"] + 1):
        if fill and fill["step"] == step:
            if fill.get("rlimit"):
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            else:
                fill_disk(fill["path"])
        prof.start_step(step)
        for role, stage in spec["regions"]:
            with prof.role(role, stage):
                for _ in range(spec.get("iterations", 1)):
                    with prof.iteration():
                        sum(range(1000))
        prof.step_boundary()
    if spec.get("finalize", True):
        prof.finalize()
    print("TRAINING DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
