"""``rlprof check [CONFIG.yaml] [key=value ...]``: validate a profiler configuration and print the resolved plan.

The command's options and output; the checks themselves are :mod:`rlprof.runtime.checking`'s.
Exit status: 0 valid; 2 invalid (every independent mistake listed at once).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from rlprof.errors import EXIT_INVALID, EXIT_OK


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; allowed: a positive whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {value}; allowed: a positive whole number (at least 1)")
    return value


def _is_override(item: str) -> bool:
    """``key=value``, ``+key=value``, ``++key=value`` and Hydra's ``~key`` (delete) are overrides;
    anything else is the config file."""
    return "=" in item or item.startswith(("~", "+"))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlprof check",
        description="Validate a profiler configuration and print the resolved plan: which roles are profiled on\n"
                    "which ranks, in which mode, at which steps. Exit 0 valid, 2 invalid: every independent mistake is\n"
                    "listed at once. The plan goes to stdout, warnings and mistakes to stderr.",
        epilog="examples:\n"
               "  rlprof check trainer.yaml --world-size 8\n"
               "  rlprof check global_profiler.tool=torch global_profiler.steps=[1,2] \\\n"
               "      actor_rollout_ref.actor.profiler.enable=true actor_rollout_ref.actor.profiler.all_ranks=true\n"
               "  rlprof check old.yaml --migrate      print the configuration in today's keys",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("items", nargs="*", metavar="CONFIG.yaml | key=value | ~key",
                        help="a YAML config file and/or dotted overrides (overrides win; ~key deletes a key)")
    parser.add_argument("--world-size", type=_positive, default=None, metavar="N",
                        help="number of ranks (default: 1 + the highest rank named, at least 2)")
    parser.add_argument("--roles", default=None, metavar="ROLES",
                        help="roles one process hosts, comma list, e.g. actor,ref (default: actor,rollout,ref in one "
                             "process; critic and reward in their own)")
    parser.add_argument("--replicas", type=_positive, default=None, metavar="N",
                        help="rollout replicas in agent-loop mode (default: the world size over the GPUs of a "
                             "replica, actor_rollout_ref.rollout's tp*dp*pp, when the config gives them; else the "
                             "world size)")
    parser.add_argument("--migrate", action="store_true", help="print the configuration in today's keys (legacy keys migrated)")
    parser.add_argument("--json", action="store_true",
                        help="print the plan as JSON (ranks as [first, last] ranges); an invalid configuration as "
                             '{"valid": false, "errors": [{"key", "value", "allowed", "message"}, ...], "warnings": [...]} '
                             "(the warnings that hold whatever the mistakes: bad values for backends that are not selected)")
    return parser


def main(args: list[str]) -> int:
    """``rlprof check``."""
    opts = parser().parse_intermixed_args(args)  # options may come between items
    files = [i for i in opts.items if not _is_override(i)]
    overrides = [i for i in opts.items if _is_override(i)]
    if len(files) > 1:
        print(f"rlprof check: at most one config file, got {len(files)}: {', '.join(files)} "
              "(overrides are key=value)", file=sys.stderr)
        return EXIT_INVALID
    from rlprof.runtime.checking import examine_config
    from rlprof.errors import ConfigError, ConfigErrors

    roles = [r.strip() for r in opts.roles.split(",") if r.strip()] if opts.roles is not None else None
    result = None
    try:
        result, errors = examine_config(files[0] if files else None, overrides, world_size=opts.world_size, roles=roles,
                                        replicas=opts.replicas, validate_backends=not opts.migrate)
        errors.raise_if_any()
    except ConfigError as exc:
        mistakes = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        # what holds whatever the mistakes: bad values for backends that are not selected
        still = result.unselected if result is not None else []
        if opts.json:
            print(json.dumps({"valid": False, "errors": [m.as_dict() for m in mistakes], "warnings": still}, indent=2))
        heading = "invalid configuration:" if len(mistakes) == 1 else f"invalid configuration, {len(mistakes)} mistakes:"
        print(f"rlprof check: {heading}", file=sys.stderr)
        for mistake in mistakes:
            print(f"  {'- ' if len(mistakes) > 1 else ''}{mistake}", file=sys.stderr)
        _warn(still)
        return EXIT_INVALID
    if opts.migrate:
        from rlprof.config.legacy import to_modern_yaml

        print(to_modern_yaml(dict(result.config.source)), end="")
        _warn(result.config.warnings)
        return EXIT_OK
    if opts.json:
        print(json.dumps({"valid": True, **result.as_dict()}, indent=2))
    else:
        print(result.render())
    _warn(result.warnings)
    return EXIT_OK


def _warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
