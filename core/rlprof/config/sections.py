"""The profiler configuration's keys, each declared once: a frozen dataclass per section, a
documented field per key.

``global_profiler`` is :class:`GlobalConfig`, each role's ``profiler`` section :class:`RoleConfig`.
A field made with :func:`~rlprof.config.fields.key` is a key users write: its reader (from
:mod:`rlprof.config.values`, :mod:`rlprof.config.schedule` or :mod:`rlprof.tool_config`) types and
checks it, its ``doc`` is what ``docs/configuration.md`` shows, its default is what an absent or
``null`` key means. The key sets (:data:`GLOBAL_KEYS`, :data:`ROLE_KEYS`), the reading and the error
messages (key path, bad value, allowed values, did-you-mean) are derived from these declarations;
the checks that span keys live in :func:`rlprof.config.schema.parse`, one per section.

Why stdlib dataclasses rather than pydantic v2 or msgspec: every profiled process imports
:mod:`rlprof.config`, and ``dataclasses`` costs nothing there (pydantic adds tens of milliseconds
of import and a dependency to every worker, msgspec a compiled dependency); the readers already
word every error the way ``rlprof check`` and the tests expect, which a validation library's own
messages would have to be translated back into; and the values to check are a handful of scalars
and lists, not a type system's worth. Field metadata carries what pydantic's ``Field`` would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from rlprof.config.fields import VERL_MARKER, key, keys_of, mirrored_keys, reference
from rlprof.config.schedule import Schedule, parse_schedule
from rlprof.config.trigger import Trigger, parse_trigger
from rlprof.config.values import (DEFAULT_CAPTURE_BUDGET_MB, DEFAULT_GATHER_BUDGET_GB, DEFAULT_REQUEST_RECORDS_MB,
                                  DEFAULT_RUN_BUDGET_GB, DEFAULT_SAVE_PATH, parse_capture_budget, parse_command,
                                  parse_gather, parse_gather_budget, parse_optional_bool, parse_optional_ranks,
                                  parse_peak_tflops, parse_ranks, parse_request_records_budget, parse_run_budget,
                                  parse_save_path, parse_steps, parse_tool_sections, parse_tools)
from rlprof.tool_config import parse_bool

VERL_TOOLS = ("nsys", "npu", "torch", "torch_memory", "precision_debugger")
"""Tool names verl's config defines sections for; their sections are never "unknown"."""

EVERY_RANK_TOOLS = ("precision_debugger",)
"""Tools for which verl selects every rank of an enabled role, whatever ``ranks``/``all_ranks`` say
(verl's DistProfiler keeps the rank gate open for msprobe, whose own ``config.json`` filters ranks; its
precision guide's configs write ``ranks: []``). rlprof follows verl: the plan
(:func:`rlprof.runtime.plan.resolve_plan`) selects those ranks, and ``ranks: []`` is not "collects nothing"."""

ENGINE_TOOLS = ("torch", "npu")
"""The tools that can capture an agent-loop rollout replica: its engine's own profiler stands in for them
(verl's servers: "agent loop only support torch and npu profiler"; :mod:`rlprof.integrations.engines.replica`
builds the stand-in). With none of them selected a replica's ``rollout_generate`` is timed and nothing is
captured in it: :func:`replica_not_captured` says why, in ``rlprof check`` and as each replica's ``skip``
reason, which the report's verdict shows. The one place this is decided."""


def not_captured_reason(*tools: str) -> str:
    """Why ``tools`` capture nothing in a rollout replica (a replica's ``skip`` reason names its one tool)."""
    who = f"{tools[0]} does" if len(tools) == 1 else f"{', '.join(tools)} do"
    return (f"{who} not capture the rollout engine: an agent-loop replica's server profiles its engine with "
            f"{' or '.join(ENGINE_TOOLS)} only (verl's rule); rlprof still times rollout_generate")


def replica_not_captured(tools: tuple[str, ...] | list[str]) -> str | None:
    """Why nothing is captured in a rollout replica with ``tools`` selected, or None when one of them can
    capture it (:data:`ENGINE_TOOLS`) or none is selected."""
    if not tools or any(t in ENGINE_TOOLS for t in tools):
        return None
    return not_captured_reason(*tools)


CORE_TOOL_KEYS = (VERL_MARKER, "discrete", "schedule", "profile_token_start", "profile_token_end")
"""Keys inside ``tool_config.<tool>`` that the core owns (the capture mode, sampling, verl's marker).
:func:`rlprof.config.load_config` removes them from every tool section it hands on
(``RoleConfig.tool_config`` and ``GlobalConfig.global_tool_config``): backends never see them."""


@dataclass(frozen=True)
class GlobalConfig:
    """``global_profiler``: which tools, which steps, where the files go."""

    tools: tuple[str, ...] = key(
        parse_tools, name="tool", mirrored=True, default=(),
        doc="The backend to profile with, a list of backends to run together (`[nsys, torch_memory]`) or "
            "`'a,b'`; `null`: profiling is off.")
    steps: tuple[int, ...] | None = key(
        parse_steps,
        doc="The profiled training steps, counted from 1 as verl counts them, each at most once; `null`: profiling is off.")
    save_path: str = key(
        parse_save_path, mirrored=True, default=DEFAULT_SAVE_PATH,
        doc="The directory every run writes under (one subdirectory per run).")
    profile_continuous_steps: bool = key(
        parse_bool, default=False,
        doc="Merge runs of consecutive profiled steps into one capture; end-to-end mode only "
            "(an error together with discrete mode).")
    discrete: bool | None = key(
        parse_optional_bool,
        doc="Discrete mode for every role that sets none of its own (`<role>.profiler.discrete`, "
            "`tool_config.<tool>.discrete` or `global_tool_config.<tool>.discrete` of a selected tool; the "
            "`discrete: false` of a tool section verl generated is its default, not a setting), as verl's nsight "
            "guide writes it; `null`: those decide (end-to-end when none is set).")
    global_tool_config: Mapping[str, Mapping[str, Any]] = key(
        parse_tool_sections, default_factory=dict,
        doc="Per tool, settings merged under every role's `tool_config.<tool>`. Loaded without the core's keys "
            "(`discrete`, `schedule`, `profile_token_start/end`, `_target_`).")
    relocate_results: bool = key(
        parse_bool, mirrored=True, default=False,
        doc="Backends move what tools write to fixed places (Ray's nsight directory) into the run's layout.")
    capture_budget_mb: float = key(
        parse_capture_budget, default=DEFAULT_CAPTURE_BUDGET_MB,
        doc="Bytes one capture may write, in MB (`0`: no limit). A capture that writes more is kept, and the next "
            "captures of its role (of the process's step, end-to-end) are skipped, each with a `skip` record naming "
            "the budget and the size measured; training goes on. The default keeps a trace that still opens in "
            "Perfetto and the report (larger traces take minutes to load and gigabytes of memory).")
    run_budget_gb: float = key(
        parse_run_budget, default=DEFAULT_RUN_BUDGET_GB,
        doc="Bytes one run may write on one node, in GB (`0`: no limit); every process of the node adds its "
            "captures to the same count. Once it is reached, capturing stops on every rank of that node (a `skip` "
            "record for each capture left out) and training goes on. The default leaves room on a node's local "
            "disk: slime measured 60 GB of profiler buffer per rank.")
    gather: str = key(
        parse_gather, default="none",
        doc="Where artifacts end up on a Ray cluster: `none` leaves each on its node (the manifest, which always "
            "reaches the controller, says which node and path); `traces`: streamed at the end of the run to the "
            "controller's `save_path` through Ray, in bounded chunks, never overwriting, each checksum verified.")
    gather_budget_gb: float = key(
        parse_gather_budget, default=DEFAULT_GATHER_BUDGET_GB,
        doc="`gather: traces` moves at most this many GB per run; past it, a warning and the rest stays on its "
            "node (training is never stopped).")
    gather_delete_local: bool = key(
        parse_bool, default=False,
        doc="`gather: traces` deletes a node's copy once the controller's copy is verified (same size and SHA-256).")
    step_metrics: bool = key(
        lambda value, key_path: parse_bool(value, key_path, default=True), default=True, recorded=True,
        doc="With a tool set, time every region of every enabled role on every rank and step, profiled or not, "
            "and turn the timings into per-step metrics (`rlprof/<role>/<region>/slowest_s`, ...: docs/analysis.md, "
            "\"Step metrics\") in the run's `step_metrics.jsonl`, the `step_metrics` hook and verl's own logger "
            "(`trainer.logger`). About a microsecond per region on the training thread (bench/bench_step_metrics.py); "
            "`false`: regions of unprofiled steps cost nothing and nothing is written.")
    request_records_mb: float = key(
        parse_request_records_budget, default=DEFAULT_REQUEST_RECORDS_MB, recorded=True,
        doc="Bytes the rollout's request records may take in one run, in MB (`0`: no limit): every request each rollout "
            "replica served, every step, compressed (`<run>/rollout_requests.jsonl.gz`, docs/analysis.md, \"Rollout "
            "requests\"; about 30 bytes a request). Past it a step's records are left out (its line says how many); "
            "the per-step figures (`rlprof/requests/...`) are always kept.")
    on_demand: bool = key(
        lambda value, key_path: parse_bool(value, key_path, default=True), default=True, recorded=True,
        doc="A run with a tool set and a role enabled is armed, whatever `steps` says (`null` included): "
            "`rlprof capture RUN` captures its next steps on every selected process, and `trigger` may capture a "
            "step that looks wrong (docs/captures.md, \"Unplanned captures\"). `false`: disarmed, only `steps` "
            "are captured.")
    trigger: Trigger | None = key(
        parse_trigger, recorded=True,
        doc="Capture the next step of an armed run when one looks wrong: `{slow_step: 1.5}` when a step takes more "
            "than 1.5x the median of the last `window` steps; `{late_rank: 0.2}` when a rank enters a region later "
            "than the others by more than 20% of the region's median time; `{rollout_tail: 0.5}` when a rollout "
            "replica's tail (from when its running requests fall below half their peak to its last end) takes more than "
            "half of its generate window; `window` (default 20, at least 3), "
            "`max_captures` (the most triggered captures in a run, default 3), `cooldown_steps` (steps after a "
            "triggered capture that trigger nothing, default 10). The capture budgets hold. `null`: no trigger.")
    peak_tflops: float | None = key(
        parse_peak_tflops, recorded=True,
        doc="The peak TFLOP/s of each profiling process's device, for MFU, where its spec is not the one to use "
            "(a power-capped card, a device the spec table lacks); `null`: the spec table's (by device name and "
            "dtype), else a short matmul calibration measured once per run and host. A figure below what the "
            "calibration measures is refused with the reason (docs/analysis.md, \"What the compute achieves\").")
    finish_hook_cmd: str | None = key(
        parse_command, mirrored=True,
        doc="A shell command run once after the last profiled step; `null`: none.")
    finish_hook_all_ranks: bool = key(
        parse_bool, mirrored=True, default=False,
        doc="Run the finish hook on every rank, not only on the profiled ones.")
    finish_hook_ranks: tuple[int, ...] | None = key(
        parse_optional_ranks, mirrored=True,
        doc="The ranks that run the finish hook; `null` or `[]`: the ranks that profile.")
    caller_steps: bool = False
    """The caller decides which steps are profiled (verl's trainer calls start_profile only on
    profiled steps): every ``start_step`` is a profiled step. Set by :mod:`rlprof.verl`, never by YAML."""


@dataclass(frozen=True)
class RoleConfig:
    """One role's ``profiler`` section, typed. ``discrete`` and ``schedule`` are already resolved
    from wherever verl lets users write them."""

    name: str
    key_path: str
    enable: bool = key(parse_bool, default=False, doc="Profile this role at all.")
    all_ranks: bool = key(parse_bool, default=False, doc="Profile the role on every rank (`ranks` is then not read).")
    ranks: tuple[int, ...] = key(
        parse_ranks, default=(),
        doc="The ranks that profile, each at most once; `[]` collects nothing. Rollout in agent-loop mode "
            "counts replica ranks. The string `'0,1'` is read as `[0, 1]` with a warning.")
    discrete: bool = key(
        parse_bool, default=False,
        doc="One capture per role region instead of one per step; also read from `tool_config.<tool>.discrete` "
            "of the selected tools, and every place must agree.")
    schedule: Schedule | None = key(
        parse_schedule,
        doc="Sampling inside a region: `{skip_first, wait, warmup, active, repeat}`, as `torch.profiler.schedule` "
            "(see docs/sampling.md); also read from `tool_config.torch.schedule` and rollout's "
            "`profile_token_start/end`, set in one place only.")
    tool_config: Mapping[str, Mapping[str, Any]] = key(
        parse_tool_sections, default_factory=dict,
        doc="Per tool, the backend's settings; loaded as `global_tool_config.<tool>` merged under it, "
            "without the core's keys.")
    follows: str | None = None
    """Set to ``actor`` when this role had no section of its own."""

    def collects_nothing(self, tools: tuple[str, ...]) -> bool:
        """Enabled, yet no rank is selected for ``tools``: ``ranks: []`` and ``all_ranks: false`` (the
        guides' rule), unless one of ``tools`` selects every rank (:data:`EVERY_RANK_TOOLS`, verl's rule).
        What ``rlprof check`` and the verl drop-in warn about."""
        return self.enable and not self.all_ranks and not self.ranks and not set(tools) & set(EVERY_RANK_TOOLS)


GLOBAL_KEYS = keys_of(GlobalConfig)
ROLE_KEYS = keys_of(RoleConfig) | mirrored_keys(GlobalConfig)


def key_reference() -> str:
    """The key table of ``docs/configuration.md``, generated from the declarations above (a test
    keeps the page equal to it): key, default, meaning."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    rows += reference(GlobalConfig, "global_profiler")
    rows += reference(RoleConfig, "<role>.profiler")
    mirrored = ", ".join(f"`{k}`" for k in sorted(mirrored_keys(GlobalConfig)))
    return "\n".join(rows) + (f"\n\nA role's `profiler` section may also carry {mirrored} (verl mirrors them from "
                              "`global_profiler` by interpolation): the global value rules. `_target_` (verl's marker) "
                              "is accepted in every section.\n")
