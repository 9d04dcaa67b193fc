"""``rlprof demo``: a small GRPO run on local Ray, profiled, then its report and the files to open.

Flags build a verl-style profiler config for the three hybrid-engine roles (actor, rollout, ref; with
``--async``, actor on the workers and rollout on the replicas that generate beside them);
dotted ``key=value`` overrides are applied on top and win, e.g.
``rlprof demo --discrete actor_rollout_ref.ref.profiler.enable=false``.
Before Ray starts, the demo checks what ``rlprof check`` knows (flags, configuration, every
worker's plan, each backend's environment, the save path, ray and torch installed) and refuses an
impossible run in one sentence. After the run it prints the report and the verdict: what was
captured, or why nothing was. Ctrl-C finalizes the workers and prints the partial report.

Exit status: 0 the run and every expected capture completed; 1 something failed or is missing;
2 bad flags or configuration, or nothing the flags ask for can be captured here; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from rlprof.config.schema import load_config
from rlprof.config.trigger import too_short
from rlprof.demo.precision import TOOL, add_default_config, default_config_path, write_default_config
from rlprof.errors import ConfigError
from rlprof.roles import nest_profiler
from rlprof.runtime.plan import armed

DEFAULT_SAVE_PATH = "rlprof-demo"
OTHER_VIEWERS = (
    ("py-spy profiles (.speedscope.json):", (".speedscope.json",), "https://www.speedscope.app"),
    ("memory snapshots (.pickle):", (".pickle",), "https://pytorch.org/memory_viz"),
)
"""(label, file name endings, viewer) for the hint after the report, of what the demo's backends write that no
reader reads (a trace is hinted where its backend's own reader says: :class:`rlprof.analysis.traces.TraceFiles`).
Only what the selected backends actually wrote is hinted (a pyspy-only run gets no torch hint)."""
PERTURBABLE = ("embed", "rnn", "head")
"""The layers of the demo's policy (:class:`rlprof.demo.grpo.TinyPolicy`) ``--perturb`` can change."""
ASYNC_ROLES = ("actor", "rollout")
"""The roles of ``--async``: the workers host actor, the replicas rollout."""
SLOWABLE = ("rollout_generate", "ref_compute_log_prob", "actor_compute_log_prob")
"""The regions ``--slow-in`` can make ``--slow-rank`` slower in: those that end in no collective (in
``actor_update`` the all-reduce would make every rank wait for the slow one, and each look as slow)."""


def config_from_flags(opts: argparse.Namespace) -> dict[str, Any]:
    """The profiler config the flags describe (a dict in verl's keys)."""
    role: dict[str, Any] = {"enable": True}
    if opts.ranks is None:
        role["all_ranks"] = True
    else:
        role["ranks"] = _ints(opts.ranks, "--ranks")
    if opts.discrete:
        role["discrete"] = True
    if opts.schedule:
        role["schedule"] = {k: int(v) for k, v in (_pair(item, "--schedule") for item in opts.schedule.split(","))}
    config: dict[str, Any] = {
        "global_profiler": {"tool": [t.strip() for t in opts.tool.split(",") if t.strip()],
                            "steps": _ints(steps_flag(opts), "--steps"), "save_path": opts.save_path},
    }
    if TOOL in config["global_profiler"]["tool"]:  # msprobe needs its own config: the demo's, unless overridden
        add_default_config(config, opts.save_path)
    if "nsys" in config["global_profiler"]["tool"]:
        # A CPU demo: capture windows as NVTX ranges (no CUDA needed); reports moved into save_path.
        config["global_profiler"].update(relocate_results=True, global_tool_config={"nsys": {"capture_range": "nvtx"}})
    # --async: the workers host actor alone, the replicas rollout (its ranks count replicas); no ref
    for name in ("actor", "rollout") if opts.async_ else ("actor", "rollout", "ref"):
        nest_profiler(config, name, dict(role))
    if opts.rollout == "vllm":  # agent-loop: rollout's ranks count replicas; listed, so ranks=[...] can narrow them
        rollout = config["actor_rollout_ref"]["rollout"]
        rollout["mode"] = "async"
        # Agent-loop rollout is always captured per generate call; say so, so that the demo's own
        # config draws no warning (the loader warns a user who wrote end-to-end rollout in that mode).
        rollout["profiler"]["discrete"] = True
        if rollout["profiler"].pop("all_ranks", False):
            rollout["profiler"]["ranks"] = list(range(opts.replicas))
    return config


def steps_flag(opts: argparse.Namespace) -> str:
    """``--steps`` as given, else the default: steps 1,2; with ``--async``, versions 2,3 (version 1 is
    the first, before which nothing was generated beside training)."""
    if opts.steps is not None:
        return opts.steps
    return "2,3" if opts.async_ else "1,2"


EXIT_OK, EXIT_FAILED, EXIT_REFUSED, EXIT_INTERRUPTED = 0, 1, 2, 130


def run(opts: argparse.Namespace) -> int:
    """The demo the flags ``opts`` describe (:func:`rlprof.cli.demo.parser`): checked, run, reported; its exit status."""
    from rlprof.demo import preflight

    began = time.perf_counter()
    try:
        preflight.check_flags(opts.workers, opts.train_steps, opts.timeout, opts.nodes)
        preflight.check_slow_rank(opts.slow_rank, opts.slow_ms, opts.workers)
        if opts.slow_in is not None and opts.slow_rank is None:
            raise preflight.Refusal(f"--slow-in {opts.slow_in}: needs --slow-rank, the rank to slow there")
        if opts.slow_from_step != 1 and opts.slow_rank is None:
            raise preflight.Refusal(f"--slow-from-step {opts.slow_from_step}: needs --slow-rank, the rank to slow from then on")
        if opts.slow_from_step < 1:
            raise preflight.Refusal(f"--slow-from-step: got {opts.slow_from_step}; allowed: a step number, 1 or more")
        if opts.slow_in == "rollout_generate" and opts.rollout == "vllm":
            raise preflight.Refusal("--slow-in rollout_generate: with --rollout vllm the replicas generate, not the ranks; "
                                    "allowed: ref_compute_log_prob, actor_compute_log_prob")
        if opts.async_:
            preflight.check_async(opts)
            replicas = opts.replicas
        else:
            replicas = preflight.check_rollout(opts.rollout, opts.replicas, opts.nodes)
        long_request = preflight.check_long_request(opts.long_request, 0 if opts.async_ else replicas)
        try:
            config = load_config(config_from_flags(opts), opts.overrides)
        except (ConfigError, ValueError) as exc:
            raise preflight.Refusal(f"invalid configuration: {exc}") from None
        g = config.global_
        steps = list(g.steps or ())
        if TOOL in g.tools and g.global_tool_config.get(TOOL, {}).get("config_path") == default_config_path(opts.save_path):
            write_default_config(default_config_path(opts.save_path))
        train_steps = opts.train_steps or (max(steps) + 1 if steps else 3)
        preflight.check_steps(config, train_steps)
        preflight.check_packages()
        found = preflight.Preflight()
        on = config.enabled or armed(config)
        if on:
            preflight.check_save_path(g.save_path)
            found = preflight.check_plan(config, opts.workers, replicas=replicas,
                                         roles=ASYNC_ROLES if opts.async_ else preflight.HYBRID_ENGINE_ROLES)
    except preflight.Refusal as refusal:
        print(f"rlprof demo: {refusal}", file=sys.stderr, flush=True)
        return EXIT_REFUSED
    short = too_short(g.trigger, train_steps) if armed(config) else None  # before the run, not after it
    for warning in [*found.warnings, *([short] if short else [])]:
        print(f"rlprof demo: warning: {warning}", file=sys.stderr, flush=True)
    mode = "discrete" if any(r.discrete and r.enable for r in config.roles.values()) else "end-to-end"
    if opts.async_:
        print(f"rlprof demo: {opts.workers} worker{'s' if opts.workers != 1 else ''} (actor each) training while "
              f"{replicas} rollout replica{'s' if replicas != 1 else ''} generate, {train_steps} versions, staleness "
              f"{opts.staleness}; profiling version{'s' if len(steps) != 1 else ''} {','.join(map(str, steps)) or 'none'} with "
              f"{','.join(g.tools) or 'no tool'} ({mode}) into {g.save_path}", flush=True)
    else:
        hosted = f"actor+ref each, rollout in {replicas} vLLM replicas" if replicas else "actor+rollout+ref each"
        print(f"rlprof demo: {opts.workers} worker{'s' if opts.workers != 1 else ''} ({hosted}), "
              f"{train_steps} GRPO steps; profiling step{'s' if len(steps) != 1 else ''} {','.join(map(str, steps)) or 'none'} with "
              f"{','.join(g.tools) or 'no tool'} ({mode}) into {g.save_path}", flush=True)
    if not on:
        print("rlprof demo: profiling is off in this configuration (no tool, no steps or no enabled role)")
    elif not config.enabled:
        print("rlprof demo: nothing planned; the run is armed: `rlprof capture` or global_profiler.trigger captures steps")

    try:
        if opts.async_:
            from rlprof.demo.async_trainer import train_async  # imports torch and ray

            run = train_async(config, workers=opts.workers, replicas=replicas, train_steps=train_steps,
                              staleness=opts.staleness, timeout_s=opts.timeout, say=lambda line: print(line, flush=True))
        else:
            from rlprof.demo.trainer import train  # imports torch and ray: not needed for --help or a refusal

            run = train(config, workers=opts.workers, train_steps=train_steps, timeout_s=opts.timeout, nodes=opts.nodes,
                        say=lambda line: print(line, flush=True), replicas=replicas, perturb=opts.perturb,
                        late={opts.slow_rank: opts.slow_ms} if opts.slow_rank is not None else None, slow_in=opts.slow_in,
                        slow_from=opts.slow_from_step, long_request=long_request)
    except ConfigError as exc:  # e.g. two backends' runtime_env fragments conflict
        print(f"rlprof demo: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    ok = _print_outcome(run) if on else run.ok
    _print_viewers(run)
    seconds = time.perf_counter() - began
    if run.interrupted_at is not None:
        where = f"at step {run.interrupted_at}" if run.interrupted_at else "before the first step"
        print(f"\nrlprof demo: interrupted {where} after {seconds:.1f} s; "
              f"the report above covers what was captured until then")
        return EXIT_INTERRUPTED
    print(f"\nrlprof demo: {'ok' if ok and run.ok else 'FAILED'} in {seconds:.1f} s")
    if not on:  # otherwise the verdict above listed them (the controller records each one)
        for failure in run.failures:
            print(f"  {failure}")
    if run.failures and run.logs_dir:
        print(f"  the workers' own output (stdout/stderr) is in Ray's log directory: {run.logs_dir}")
    return EXIT_OK if ok and run.ok else EXIT_FAILED


def _print_outcome(run) -> bool:
    """Print the run's report (this node's save path), then the verdict; True when it is ok."""
    from rlprof.analysis.compute import add_compute
    from rlprof.analysis.inside import add_inside
    from rlprof.analysis.report import build_reports, render, verdict
    from rlprof.analysis.rollout_requests import add_request_curves

    reports = build_reports([run.run_dir])
    add_inside(reports, warn=lambda line: print(line, file=sys.stderr))  # the split inside regions, and who waited for whom
    add_request_curves(reports)  # the rollout's requests: the slowest ids, as rlprof report shows them
    add_compute(reports)  # what the compute achieved: FLOPs and MFU
    shown = render(reports[0]) if reports else ""
    if shown:
        print()
        print(shown)
    if not reports:  # nothing was profiled: the verdict says why
        outcome = verdict([run.run_dir])
        print()
        print("\n".join(f"verdict: {line}" for line in outcome.lines))
        return outcome.ok
    return reports[0].ok  # render() ended with this report's verdict


def _print_viewers(run) -> None:
    """Where to open what the run wrote (the report above lists the files themselves): each trace where its
    backend's reader says (``traces (<its pattern>): open in <viewer>``), then the other files."""
    from rlprof.analysis.traces import TraceFiles

    files = TraceFiles(str(a.get("backend")) for a in run.artifacts)
    hints: dict[str, None] = {}
    for a in run.artifacts:
        found = files.claimed(str(a.get("backend")), Path(a["path"]))
        if found is not None and found[0].opened_in:
            hints[f"traces ({found[1]}): open in {found[0].opened_in}"] = None
    names = {Path(a["path"]).name for a in run.artifacts}
    hints.update(dict.fromkeys(f"{label} open in {viewer}" for label, suffixes, viewer in OTHER_VIEWERS
                               if any(name.endswith(suffixes) for name in names)))
    if hints:
        print()
        print("\n".join(hints))


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{flag}: got {text!r}; allowed: comma-separated integers, e.g. 1,2") from None


def _pair(item: str, flag: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not value.strip().isdigit():
        raise ConfigError(f"{flag}: got {item!r}; allowed: name=integer pairs, e.g. active=1,wait=0")
    return key.strip(), value.strip()
