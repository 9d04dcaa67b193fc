"""The ``rlprof`` command line: one argparse parser whose subcommands are loaded only when run.

Each built-in command is one module of this package, exposing ``main(argv) -> int``: it parses its own
arguments, then calls into its layer (``check``, ``backends``, ``capture``, ``demo``, ``report``,
``timeline``, ``breakdown``, ``compare``, ``peak``; ``step_split`` is the program a profiling process runs in a
child, and ``late_split`` the one a step's book starts for a split finished after the run, not commands). Nothing below this package parses arguments or joins a Ray cluster for a command:
the analysis and the runtime take plain values. Backends add commands through their ``cli_commands`` hook
(:func:`rlprof.hookspecs.cli_commands`: name -> :class:`~rlprof.hookspecs.CliCommand`, its own
one-line help and a function of the remaining arguments returning an exit status), e.g.
``rlprof relocate`` from rlprof-nsys; the deprecated ``rlprof.commands`` entry points still work.
Backends are loaded for that (by the one plugin loader, :mod:`rlprof.plugins`) only to list the
commands or to run one that is not built in, never for a built-in command; a broken plugin is one
line naming its distribution and version, and never breaks ``rlprof --help``.

Exit status: 0 success; 1 something failed; 2 invalid usage or configuration. Results go to
stdout, warnings and errors to stderr. A command that writes a file where the user works follows
:mod:`rlprof.cli.output_file`: an existing ``-o FILE`` is replaced only with ``--force``; without ``-o`` it
names its own file and never replaces one.
"""

from __future__ import annotations

import argparse
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
            "rlprof.cli.check:main"),
    Command("backends", "list the installed profiling backends, their package, version, hook contract and hooks",
            "[--json]", "rlprof.cli.backends:main"),
    Command("demo", "run a small GRPO-shaped training on local Ray, profiled, then report it",
            "[--tool torch] [--steps 1,2] [...]", "rlprof.cli.demo:main"),
    Command("capture", "ask a running job to capture its next N steps (an armed run); prints which steps",
            "RUN [--steps N] [--wait S]", "rlprof.cli.capture:main"),
    Command("report", "where each profiled step's time went, per region and rank; the files; what is missing",
            "RUN [RUN ...] [--run ID] [--json] [--html [-o FILE] [--force]]", "rlprof.cli.report:main"),
    Command("timeline", "one Chrome/Perfetto trace of a whole run: a process per rank, a track per role",
            "RUN [-o FILE] [--force] [--with-traces] [--steps 1,2]", "rlprof.cli.timeline:main"),
    Command("breakdown", "inside each region of trace files: compute, exposed communication, copies, idle",
            "PATH [PATH ...] [--json] [--steps] [--regions] [--address ADDR]", "rlprof.cli.breakdown:main"),
    Command("compare", "compare the region timings of two runs (--fail-above PCT for CI)",
            "RUN_A RUN_B [--ranks] [--json] [--fail-above PCT]", "rlprof.cli.compare:main"),
    Command("peak", "the peak FLOP/s a plain matmul reaches on this device and dtype (what MFU is divided by)",
            "[--device D] [--dtype D] [--json]", "rlprof.cli.peak:main"),
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


def not_found(command: str, paths: Sequence[str]) -> bool:
    """Say which of ``paths`` do not exist (``rlprof <command>: not found: ...`` on stderr): a usage error of a
    command that reads runs (exit 2). True when one is missing."""
    from pathlib import Path

    absent = [p for p in paths if not Path(p).exists()]
    if absent:
        print(f"rlprof {command}: not found: {', '.join(absent)}", file=sys.stderr)
    return bool(absent)


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
