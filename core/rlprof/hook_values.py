"""The values some hooks return: a command a backend adds (:class:`CliCommand`, from ``cli_commands``) and how the
analysis reads its traces (:class:`TraceReader`, from ``trace_reader``). Backends import them from
:mod:`rlprof.hookspecs`, beside the hooks that return them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

@dataclass(frozen=True)
class CliCommand:
    """One command a backend adds to ``rlprof`` (the values :func:`cli_commands` returns)."""

    summary: str
    """One line shown by ``rlprof --help`` next to the command's name."""
    run: Callable[[list[str]], int]
    """Runs the command with the arguments after its name; returns the exit status (0 ok, 1 failed,
    2 invalid usage). It parses its own arguments (and its own ``--help``)."""
    usage: str = "[...]"
    """The synopsis after ``rlprof <name>`` in ``rlprof --help``."""


@dataclass(frozen=True)
class TraceReader:
    """How the analysis reads the trace files of one backend (the value :func:`trace_reader` returns)."""

    patterns: tuple[str, ...]
    """File name patterns (``fnmatch``, on the name only) of the files it reads, e.g. ``("*.json", "*.json.gz")``.
    When two backends' patterns match one file, the pattern with more literal characters wins
    (``trace_view.json`` over ``*.json``)."""
    target: str
    """``"module:function"``: the function takes a file's path (``str``) and returns its
    :class:`rlprof.analysis.breakdown.TraceEvents`, raising on a file it cannot read (the message is the
    one line the user sees). Named, not passed, so it is picklable: it runs in the worker processes of a
    pool, and is imported only when a file of its format is read."""
    format: str = ""
    """The format in a few words (``Kineto JSON``), for messages."""
    not_traces: tuple[str, ...] = ()
    """File name patterns of what this backend writes beside its traces that is not a trace (metadata,
    summaries: torch_npu's ``profiler_info_*.json``). A folder walk names such a file as skipped, saying
    whose it is, rather than handing it to another reader whose broader pattern matches (``*.json``);
    the same rule of the more literal pattern decides between a claim and this."""
    chrome: bool = False
    """Its files are Chrome trace-event JSON (a ``traceEvents`` list, as Kineto writes): ``rlprof timeline
    --with-traces`` merges their events into the run's timeline, and a person opens them in Perfetto."""
    viewer: str = ""
    """Where a person opens these files (a program or a URL), for hints such as the demo's; a Chrome trace's
    is :data:`CHROME_VIEWER` unless given."""

    @property
    def opened_in(self) -> str:
        """:attr:`viewer`, or for a Chrome trace :data:`CHROME_VIEWER`; "" when nobody said."""
        return self.viewer or (CHROME_VIEWER if self.chrome else "")


CHROME_VIEWER = "Perfetto (https://ui.perfetto.dev) or chrome://tracing"
"""Where a Chrome trace opens (:attr:`TraceReader.chrome`)."""
