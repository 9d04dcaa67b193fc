"""The ``rlprof`` command.

``rlprof backends [--json]``                 what is installed, from where, which hooks, does it import
``rlprof check [CONFIG.yaml] [k=v ...] [--world-size N] [--roles actor,ref] [--migrate]``
                                             the resolved plan per step and rank; exit 0 valid, 2 invalid
``rlprof demo [...]``                        a small GRPO-shaped run on local Ray, profiled (rlprof.demo)
``rlprof report SAVE_PATH [...] [--json]``   what a run produced, per step x role x rank (rlprof.report)

Plugins add verbs through the ``rlprof.commands`` entry-point group (``name = module:function``,
the function takes the remaining argv and returns an exit status), e.g. ``rlprof npu-analyse``.

Exit status: 0 success; 2 invalid configuration or usage; 1 anything else that failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
COMMAND_GROUP = "rlprof.commands"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    builtin = {"backends": _backends, "check": _check, "demo": _lazy("rlprof.demo"), "report": _lazy("rlprof.report"),
               "timeline": _lazy("rlprof.timeline"), "compare": _lazy("rlprof.compare")}
    if argv and argv[0] in builtin:
        return builtin[argv[0]](argv[1:])
    extra = _plugin_commands()
    if argv and argv[0] in extra:
        try:
            func = extra[argv[0]].load()
        except Exception as exc:
            print(f"rlprof: the command {argv[0]!r} (entry point {extra[argv[0]].value!r}) failed to import: {exc}", file=sys.stderr)
            return EXIT_FAILED
        return int(func(argv[1:]) or 0)
    verbs = sorted(builtin) + sorted(extra)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        if extra:
            print("\nplugin commands: " + ", ".join(sorted(extra)))
        return EXIT_OK if argv else EXIT_INVALID
    if argv[0] == "--version":
        from . import __version__

        print(f"rlprof {__version__}")
        return EXIT_OK
    print(f"rlprof: unknown command {argv[0]!r}; commands: {', '.join(verbs)}", file=sys.stderr)
    return EXIT_INVALID


def _lazy(module: str):
    def run(args: list[str]) -> int:
        import importlib

        return int(importlib.import_module(module).main(args) or 0)

    return run


def _plugin_commands():
    from importlib import metadata

    return {ep.name: ep for ep in metadata.entry_points(group=COMMAND_GROUP)}


# ----------------------------------------------------------------------------- backends


def _backends(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlprof backends", description="List installed profiling backends.")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    opts = parser.parse_args(args)
    from .registry import backend_info, discover

    infos = [backend_info(name, ep) for name, ep in sorted(discover().items())]
    if opts.json:
        print(json.dumps(infos, indent=2))
        return EXIT_OK
    if not infos:
        print("no backends installed (pip install rlprof-torch, rlprof-nsys or rlprof-npu, or your own)")
        return EXIT_OK
    for info in infos:
        status = "ok" if info["imports"] else "IMPORT FAILED"
        print(f"{info['name']:<14} {info['distribution']} {info['version']:<10} {status}")
        print(f"{'':<14} entry point: {info['entry_point']}")
        if info["imports"]:
            print(f"{'':<14} hooks: {', '.join(info['hooks'])}")
        else:
            print(f"{'':<14} error: {info['error']}")
        for problem in info.get("problems", []):
            print(f"{'':<14} warning: {problem}")
    return EXIT_OK


# ----------------------------------------------------------------------------- check


def _check(args: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="rlprof check",
        description="Validate a profiler configuration and print the resolved plan. Exit 0 valid, 2 invalid.",
    )
    parser.add_argument("items", nargs="*", help="a YAML config file and/or key=value overrides (overrides win)")
    parser.add_argument("--world-size", type=int, default=None, help="number of ranks (default: 1 + the highest rank named, at least 2)")
    parser.add_argument("--roles", default=None, help="roles one process hosts, comma list (default: actor,rollout,ref then critic, reward as separate processes)")
    parser.add_argument("--replicas", type=int, default=None, help="rollout replicas in agent-loop mode (default: world size)")
    parser.add_argument("--migrate", action="store_true", help="print the configuration in today's keys (legacy keys migrated)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    opts = parser.parse_args(args)
    files = [i for i in opts.items if "=" not in i]
    overrides = [i for i in opts.items if "=" in i]
    if len(files) > 1:
        print(f"rlprof check: at most one config file, got {files}", file=sys.stderr)
        return EXIT_INVALID
    from .checking import check_config
    from .errors import ConfigError

    try:
        result = check_config(files[0] if files else None, overrides, world_size=opts.world_size,
                              roles=opts.roles.split(",") if opts.roles else None, replicas=opts.replicas,
                              validate_backends=not opts.migrate)
    except ConfigError as exc:
        print(f"rlprof check: invalid configuration:\n  {exc}", file=sys.stderr)
        return EXIT_INVALID
    if opts.migrate:
        from .legacy import to_modern_yaml

        print(to_modern_yaml(dict(result.config.source)), end="")
        for warning in result.config.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        return EXIT_OK
    if opts.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(result.render())
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
