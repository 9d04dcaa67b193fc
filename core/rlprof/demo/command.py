"""``rlprof demo``: a small GRPO run on local Ray, profiled, then its report and the files to open.

Flags build a verl-style profiler config for the three hybrid-engine roles (actor, rollout, ref);
dotted ``key=value`` overrides are applied on top and win, e.g.
``rlprof demo --discrete actor_rollout_ref.ref.profiler.enable=false``.
Exit status: 0 the run and every expected capture completed; 1 something failed or is missing;
2 bad flags or configuration.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..config import ROLE_PATHS, load_config
from ..errors import ConfigError

DEFAULT_SAVE_PATH = "rlprof-demo"
TRACE_SUFFIXES = (".json.gz", ".json")
VIEWERS = "Perfetto (https://ui.perfetto.dev) or chrome://tracing"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlprof demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--tool", default="torch", help="backend name or comma list (default: torch)")
    p.add_argument("--steps", default="1,2", help="profiled steps, comma list (default: 1,2)")
    p.add_argument("--train-steps", type=int, default=None, help="training steps to run (default: last profiled step + 1)")
    p.add_argument("--ranks", default=None, help="profile only these ranks, comma list (default: all ranks)")
    p.add_argument("--discrete", action="store_true", help="one capture per role region instead of one per step")
    p.add_argument("--schedule", default=None, metavar="active=1,wait=0",
                   help="sample iterations inside each role region (each role's profiler.schedule)")
    p.add_argument("--save-path", default=DEFAULT_SAVE_PATH, help=f"where profiles go (default: ./{DEFAULT_SAVE_PATH})")
    p.add_argument("--workers", type=int, default=2, help="worker actors, one rank each (default: 2)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for any worker call (default: 120)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted config overrides; they win over the flags")
    return p


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
                            "steps": _ints(opts.steps, "--steps"), "save_path": opts.save_path},
    }
    if "nsys" in config["global_profiler"]["tool"]:
        # A CPU demo: capture windows as NVTX ranges (no CUDA needed); reports moved into save_path.
        config["global_profiler"].update(relocate_results=True, global_tool_config={"nsys": {"capture_range": "nvtx"}})
    for name in ("actor", "rollout", "ref"):
        section = config
        for key in ROLE_PATHS[name].split("."):
            section = section.setdefault(key, {})
        section["profiler"] = dict(role)
    return config


def main(argv: Sequence[str] | None = None) -> int:
    opts = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    began = time.perf_counter()
    try:
        config = load_config(config_from_flags(opts), opts.overrides)
    except (ConfigError, ValueError) as exc:
        print(f"rlprof demo: invalid configuration:\n  {exc}", file=sys.stderr)
        return 2
    g = config.global_
    steps = list(g.steps or ())
    train_steps = opts.train_steps or (max(steps) + 1 if steps else 3)
    mode = "discrete" if any(r.discrete and r.enable for r in config.roles.values()) else "end-to-end"
    print(f"rlprof demo: {opts.workers} workers (actor+rollout+ref each), {train_steps} GRPO steps; "
          f"profiling steps {','.join(map(str, steps)) or 'none'} with {','.join(g.tools) or 'no tool'} ({mode}) "
          f"into {g.save_path}", flush=True)
    if not config.enabled:
        print("rlprof demo: profiling is off in this configuration (no tool, no steps or no enabled role)")

    from .trainer import train  # imports torch and ray: not needed for --help or a bad flag

    try:
        run = train(config, workers=opts.workers, train_steps=train_steps, timeout_s=opts.timeout,
                    say=lambda line: print(line, flush=True))
    except ConfigError as exc:  # e.g. a tool that is not installed, a rank outside the world
        print(f"rlprof demo: invalid configuration:\n  {exc}", file=sys.stderr)
        return 2
    problems = _print_report(run) if config.enabled else 0
    _print_files(run)
    status = "ok" if run.ok and not problems else "FAILED"
    print(f"\nrlprof demo: {status} in {time.perf_counter() - began:.1f} s")
    for failure in run.failures:
        print(f"  {failure}")
    return 0 if status == "ok" else 1


def _print_report(run) -> int:
    """Print the run's report (this node's save path); returns its problem count."""
    from ..report import build_reports, render

    reports = build_reports([run.run_dir])
    print()
    if not reports:
        print(f"no manifests under {run.run_dir}: nothing was profiled")
        return 1
    print(render(reports[0]))
    return reports[0].problem_count


def _print_files(run) -> None:
    paths = sorted({run.run_dir / a["path"] for a in run.artifacts})
    traces = [p for p in paths if p.name.endswith(TRACE_SUFFIXES)]
    others = [p for p in paths if p not in traces]
    if traces:
        print(f"\ntraces to open in {VIEWERS}:")
        print("\n".join(f"  {_shown(p)}" for p in traces))
    if others:
        print("\nother artifacts:")
        print("\n".join(f"  {_shown(p)}" for p in others))


def _shown(path: Path) -> str:
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else str(path)


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
