"""The ``rlprof`` command: one argparse parser whose subcommands are loaded only when run.

Built-in commands live in their own modules, each exposing ``main(argv) -> int`` with its own
argparse parser (``rlprof.demo``, ``rlprof.analysis.report``, ``rlprof.analysis.timeline``, ``rlprof.analysis.compare``,
``rlprof.analysis.breakdown_files``);
``check`` and ``backends`` are here. Backends add commands through their ``cli_commands`` hook
(:func:`rlprof.hookspecs.cli_commands`: name -> :class:`~rlprof.hookspecs.CliCommand`, its own
one-line help and a function of the remaining arguments returning an exit status), e.g.
``rlprof relocate`` from rlprof-nsys; the deprecated ``rlprof.commands`` entry points still work.
Backends are loaded for that (by the one plugin loader, :mod:`rlprof.plugins`) only to list the
commands or to run one that is not built in, never for a built-in command; a broken plugin is one
line naming its distribution and version, and never breaks ``rlprof --help``.

Exit status: 0 success; 1 something failed; 2 invalid usage or configuration. Results go to
stdout, warnings and errors to stderr. A command that writes a file where the user works follows
:mod:`rlprof.output_file`: an existing ``-o FILE`` is replaced only with ``--force``; without ``-o`` it
names its own file and never replaces one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from rlprof.errors import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from rlprof.invocation import rlprof_command

@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    usage: str
    """One line of synopsis shown in ``rlprof --help`` (the command's own ``--help`` has the rest)."""
    target: str | Callable[[list[str]], int]
    """Run with the remaining arguments: the function, or ``module:function`` imported when it runs."""
    origin: str = "rlprof"


BUILTIN = (
    Command("check", "validate a configuration and print the resolved plan (exit 0 valid, 2 invalid)",
            "[CONFIG.yaml] [key=value ...] [--world-size N] [--roles actor,ref] [--replicas N] [--json] [--migrate]",
            "rlprof.cli:check_main"),
    Command("backends", "list the installed profiling backends, their package, version, hook contract and hooks",
            "[--json]", "rlprof.cli:backends_main"),
    Command("demo", "run a small GRPO-shaped training on local Ray, profiled, then report it",
            "[--tool torch] [--steps 1,2] [...]", "rlprof.demo:main"),
    Command("capture", "ask a running job to capture its next N steps (an armed run); prints which steps",
            "RUN [--steps N] [--wait S]", "rlprof.capture:main"),
    Command("report", "where each profiled step's time went, per region and rank; the files; what is missing",
            "RUN [RUN ...] [--run ID] [--json] [--html [-o FILE] [--force]]", "rlprof.analysis.report:main"),
    Command("timeline", "one Chrome/Perfetto trace of a whole run: a process per rank, a track per role",
            "RUN [-o FILE] [--force] [--with-traces] [--steps 1,2]", "rlprof.analysis.timeline:main"),
    Command("breakdown", "inside each region of trace files: compute, exposed communication, copies, idle",
            "PATH [PATH ...] [--json] [--steps] [--regions] [--address ADDR]", "rlprof.analysis.breakdown_files:main"),
    Command("compare", "compare the region timings of two runs (--fail-above PCT for CI)",
            "RUN_A RUN_B [--ranks] [--json] [--fail-above PCT]", "rlprof.analysis.compare:main"),
    Command("peak", "the peak FLOP/s a plain matmul reaches on this device and dtype (what MFU is divided by)",
            "[--device D] [--dtype D] [--json]", "rlprof.peak_cli:main"),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlprof ARGV``; returns the exit status (``python -m rlprof.cli`` exits with it)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {c.name: c for c in BUILTIN}
    if not argv or argv[0].startswith("-") or argv[0] not in commands:  # listing, or a command plugins may add
        for command in _plugin_commands():
            commands.setdefault(command.name, command)
    parser = build_parser(commands)
    if not argv:
        parser.print_usage(sys.stderr)
        print(_command_list(commands), file=sys.stderr)
        rlprof = rlprof_command()
        print(f"\nrun '{rlprof} --help' for more, '{rlprof} COMMAND --help' for a command's options", file=sys.stderr)
        return EXIT_INVALID
    name = argv[0]
    if name.startswith("-"):
        try:
            parser.parse_args(argv[:1])  # --help and --version print and exit; anything else is a usage error
        except SystemExit as exit_:
            return int(exit_.code or 0)
        return EXIT_INVALID  # pragma: no cover - parse_args always exits for a lone option
    if name not in commands:
        from rlprof.errors import did_you_mean

        print(f"rlprof: unknown command {name!r}{did_you_mean(name, commands)}; commands: {', '.join(commands)}",
              file=sys.stderr)
        return EXIT_INVALID
    return _run(commands[name], argv[1:])


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    """The top-level parser: ``--version``, ``--help`` and one subparser per command (for the help
    text and the list of choices; each command parses its own arguments)."""
    from rlprof import __version__

    parser = argparse.ArgumentParser(
        prog="rlprof",
        description="rlprof: one profiling layer for distributed RL training (verl-style roles on Ray).",
        epilog="synopsis:\n" + "\n".join(f"  rlprof {c.name} {c.usage}" for c in commands.values())
        + "\n\nrun 'rlprof COMMAND --help' for a command's options. Exit status: 0 ok, 1 failed, 2 invalid usage or "
          "configuration.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlprof {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for command in commands.values():
        summary = command.summary if command.origin == "rlprof" else f"{command.summary} (from {command.origin})"
        sub.add_parser(command.name, help=summary, add_help=False)
    return parser


def _command_list(commands: dict[str, Command]) -> str:
    width = max(len(n) for n in commands) + 2
    return "commands:\n" + "\n".join(f"  {c.name:<{width}}{c.summary}" for c in commands.values())


def _run(command: Command, args: list[str]) -> int:
    try:
        func = command.target if callable(command.target) else _load(command.target)
    except Exception as exc:  # a missing optional module or a broken plugin: say which, never a traceback
        print(f"rlprof {command.name}: cannot be loaded ({command.target} from {command.origin}): "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        status = func(args)
    except KeyboardInterrupt:
        print(f"rlprof {command.name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `rlprof report RUN | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not fail again
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("RLPROF_DEBUG"):
            raise
        print(f"rlprof {command.name}: failed: {type(exc).__name__}: {exc} (set RLPROF_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return EXIT_FAILED
    return int(status or 0)


def _load(target: str) -> Callable[[list[str]], int]:
    import importlib

    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr or "main")


def _plugin_commands() -> list[Command]:
    """Commands the installed backends add (their ``cli_commands`` hook, or the deprecated
    ``rlprof.commands`` entry points). A backend that cannot be loaded, or whose hook fails or answers
    something else, costs one line on stderr naming its distribution and version; the rest stay."""
    from rlprof.hookspecs import CliCommand
    from rlprof.plugins import implementations

    found, problems = implementations("cli_commands")
    lines = [line for _, line in problems]
    out = []
    for impl in found:
        try:
            offered = dict(impl.call() or {})
        except Exception as exc:
            lines.append(impl.problem(f"cli_commands failed: {type(exc).__name__}: {exc}"))
            continue
        for name, command in offered.items():
            if isinstance(command, CliCommand):
                out.append(Command(str(name), command.summary, command.usage, command.run,
                                   f"{impl.distribution} {impl.version}"))
            else:
                lines.append(impl.problem(f"cli_commands answered {command!r} for {name!r}, not a "
                                          "rlprof.hookspecs.CliCommand"))
    for line in lines:
        print(f"rlprof: {line}", file=sys.stderr)
    return out


def _warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


# ----------------------------------------------------------------------------- backends


def backends_main(args: list[str]) -> int:
    """``rlprof backends``: what is installed, from where, which hooks, does it import."""
    parser = argparse.ArgumentParser(prog="rlprof backends", description="List the installed profiling backends.")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    opts = parser.parse_args(args)
    from rlprof.installed import discover
    from rlprof.runtime.registry import backend_info

    infos = [backend_info(name, ep) for name, ep in sorted(discover().items())]
    if opts.json:
        print(json.dumps(infos, indent=2))
        return EXIT_OK
    if not infos:
        print("no backends installed (pip install rlprof-torch, rlprof-nsys or rlprof-npu, or your own)")
        return EXIT_OK
    name_w = max(len(i["name"]) for i in infos) + 2
    dist_w = max(len(f"{i['distribution']} {i['version']}") for i in infos) + 2
    pad = " " * name_w
    for info in infos:
        status = "ok" if info["imports"] else ("REFUSED" if info.get("refused") else "IMPORT FAILED")
        print(f"{info['name']:<{name_w}}{info['distribution'] + ' ' + info['version']:<{dist_w}}{status}")
        print(f"{pad}entry point: {info['entry_point']}")
        if info["imports"]:
            declared = "" if info["contract_declared"] else " (assumed: the backend declares none)"
            print(f"{pad}contract: {info['contract']}{declared}")
            print(f"{pad}hooks: {', '.join(info['hooks'])}")
        else:
            print(f"{pad}error: {info['error']}")
        for problem in info.get("problems", []):
            print(f"{pad}warning: {problem}")
    return EXIT_OK


# ----------------------------------------------------------------------------- check


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


def check_parser() -> argparse.ArgumentParser:
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


def check_main(args: list[str]) -> int:
    """``rlprof check``."""
    opts = check_parser().parse_intermixed_args(args)  # options may come between items
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
