"""``python -m rlprof.verl <module> [args...]``: run a verl entry point with rlprof's profiler classes.

Example: ``python -m rlprof.verl verl.trainer.main_ppo global_profiler.tool=torch
global_profiler.steps=[1] actor_rollout_ref.actor.profiler.enable=true ...``. The module runs as
``__main__`` with ``sys.argv`` = ``[<module>, args...]`` (Hydra reads its overrides from there).
"""

from __future__ import annotations

import runpy
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    from rlprof.integrations.verl.install import install

    install()
    module, args = argv[0], argv[1:]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
