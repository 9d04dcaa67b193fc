"""What a backend may use from rlprof, in one place: a plugin imports these names from here, and nothing else of
rlprof but the names that stay where they are (``rlprof.hookimpl``, ``rlprof.testing``, ``rlprof.layout``,
``rlprof.errors``). ``tests/architecture/test_layers.py`` holds every plugin under ``plugins/`` to it.

Why one module: a plugin that reaches into the core's modules (``rlprof.analysis.breakdown``,
``rlprof.runtime.trace_writer``) ties itself to where the core keeps things today; the core then cannot move
a module without breaking a backend it does not see. What is here is the promise: these names keep their
meaning within a hook contract (:data:`rlprof.hookspecs.CONTRACT`), wherever the core keeps them.

* the hooks' values: :class:`CliCommand` (``cli_commands``), :class:`TraceReader` (``trace_reader``) and
  :data:`CHROME_VIEWER`;
* a backend's own section of the config: :func:`check_keys`, :func:`parse_bool`, :func:`parse_contents`
  (the errors they raise name the key, the value and what is allowed); :func:`load_config`, for a command that
  reads a run's configuration;
* saying a thing once per process: :func:`say_once`, :func:`mark_said`; a time limit from the environment:
  :func:`seconds_from_env`;
* writing traces off the capturing thread: :class:`TraceWriter`, :class:`Export`, :func:`process_writer`;
* reading a run's manifest after it: :func:`read_records`, :func:`manifest_files`, :func:`artifacts`,
  :func:`record_relocation` (a file moved into the run after its process ended);
* reading traces for the breakdown (a ``trace_reader`` target): :class:`TraceEvents`, :class:`Region`,
  :data:`COMPUTE`, :data:`COMMUNICATION`, :data:`MEMORY`, :func:`device_kind`, :func:`is_host_collective`,
  :func:`numbered_collectives`, :func:`regions_in_steps`, and :class:`BoundedTokens` (a JSON stream read with a
  bound on one token);
* FLOPs in a trace: :func:`op_flops` (an operator's counted FLOPs), :func:`is_uncounted` and
  :data:`COUNTED` (compute no count covers, shown as such, never as a low MFU), :func:`recorded_peak` (the peak a
  run recorded, for MFU).

Importing it costs nothing: each name loads its module when first used (no torch, Ray or NVTX in any of them), so
a backend's hooks never pull in the analysis its trace reader uses; docs/writing-a-backend.md lists the same names.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "CHROME_VIEWER": "rlprof.hookspecs", "CliCommand": "rlprof.hookspecs", "TraceReader": "rlprof.hookspecs",
    "check_keys": "rlprof.tool_config", "parse_bool": "rlprof.tool_config", "parse_contents": "rlprof.tool_config",
    "load_config": "rlprof.config.schema",
    "say_once": "rlprof.notices", "mark_said": "rlprof.notices",
    "seconds_from_env": "rlprof.env_seconds",
    "TraceWriter": "rlprof.runtime.trace_writer", "Export": "rlprof.runtime.trace_writer",
    "process_writer": "rlprof.runtime.trace_writer",
    "read_records": "rlprof.manifest", "manifest_files": "rlprof.manifest", "artifacts": "rlprof.manifest",
    "record_relocation": "rlprof.manifest",
    "TraceEvents": "rlprof.analysis.breakdown", "Region": "rlprof.analysis.breakdown", "COMPUTE": "rlprof.analysis.breakdown",
    "COMMUNICATION": "rlprof.analysis.breakdown", "MEMORY": "rlprof.analysis.breakdown",
    "device_kind": "rlprof.analysis.breakdown", "is_host_collective": "rlprof.analysis.breakdown",
    "numbered_collectives": "rlprof.analysis.breakdown", "regions_in_steps": "rlprof.analysis.breakdown",
    "BoundedTokens": "rlprof.analysis.streams",
    "COUNTED": "rlprof.analysis.op_flops", "is_uncounted": "rlprof.analysis.op_flops", "op_flops": "rlprof.analysis.op_flops",
    "recorded_peak": "rlprof.peak",
}
"""Each name -> the module that holds it today. A name is imported when first asked for, so a training process that
imports a backend (its hooks, its writer) never imports the analysis a trace reader uses in another process."""

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rlprof.backend_api' has no attribute {name!r}; a backend may use: {', '.join(__all__)}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # for readers and type checkers: the same names, imported eagerly
    from rlprof.analysis.breakdown import (COMMUNICATION, COMPUTE, MEMORY, Region, TraceEvents, device_kind,  # noqa: F401
                                          is_host_collective, numbered_collectives, regions_in_steps)
    from rlprof.analysis.op_flops import COUNTED, is_uncounted, op_flops  # noqa: F401
    from rlprof.analysis.streams import BoundedTokens  # noqa: F401
    from rlprof.config.schema import load_config  # noqa: F401
    from rlprof.env_seconds import seconds_from_env  # noqa: F401
    from rlprof.hookspecs import CHROME_VIEWER, CliCommand, TraceReader  # noqa: F401
    from rlprof.manifest import artifacts, manifest_files, read_records, record_relocation  # noqa: F401
    from rlprof.notices import mark_said, say_once  # noqa: F401
    from rlprof.peak import recorded_peak  # noqa: F401
    from rlprof.runtime.trace_writer import Export, TraceWriter, process_writer  # noqa: F401
    from rlprof.tool_config import check_keys, parse_bool, parse_contents  # noqa: F401
