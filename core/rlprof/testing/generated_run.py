"""Write a whole run's manifests — as the core's Profilers would — without running any training.

Use it to test or benchmark what reads a run (``rlprof report``, ``timeline``, ``compare``) at sizes
no test machine can train at: 64 ranks on 8 hosts, many steps, gigabytes of trace files. The records
are the ones the core writes (``process``, ``step``, ``region``, ``artifact``, ``finalized``, in the
order and with the fields of the manifest format, through the real :class:`~rlprof.manifest.ManifestWriter`);
only the numbers are made up, from a fixed seed, so a test can say which rank is slow and by how much.

The trace files are stand-ins: filler bytes of the requested size (``sparse=True``: holes, no disk
blocks), not Chrome traces. Readers that honour "never parse traces" cannot tell the difference.

::

    run_dir = generate_run(tmp_path, ranks=64, steps=(1, 2), trace_bytes=1 << 30, slow={(7, "actor_update"): 1.6})

``replicas=N`` writes verl's agent-loop shape: ``N`` rollout replica processes (``replica_rank``
``0..N-1``, manifest ``rank`` ``0..N-1`` too, as engines report it, on their own pids) run the
``rollout`` regions, discrete, while the trainer ranks wait outside any region; the trainer ranks
then run the other regions once the slowest replica is done.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from rlprof.manifest import ManifestWriter, ProcessRecord

START_NS = 1_795_000_000_000_000_000
"""Wall clock (``time.time_ns()``) of the first step's start: a fixed instant, so runs are reproducible."""


@dataclass(frozen=True)
class RegionSpec:
    """One region every selected process runs once per step, in list order.

    ``parent`` names an earlier region of the list this one runs inside (nesting: it starts
    ``offset_ms`` after its parent starts); top-level regions follow each other."""

    role: str
    region: str
    ms: float
    parent: str | None = None
    offset_ms: float = 0.0
    iterations: tuple[int, int] | None = None


GRPO_REGIONS = (
    RegionSpec("rollout", "rollout_generate", 40.0, iterations=(0, 15)),
    RegionSpec("ref", "ref_compute_log_prob", 8.0),
    RegionSpec("actor", "actor_compute_log_prob", 9.0),
    RegionSpec("actor", "actor_update", 30.0),
    RegionSpec("actor", "actor_optimizer_step", 6.0, parent="actor_update", offset_ms=22.0),
)
"""A GRPO-shaped step (what ``rlprof demo`` runs), with one nested region."""

GAP_MS = 1.0
"""Time between two top-level regions (the controller's own work, untracked)."""


def generate_run(
    save_path: os.PathLike | str,
    *,
    run_id: str = "20261122-050000-a1b2c3",
    ranks: int | Sequence[int] = 2,
    steps: Sequence[int] = (1, 2),
    ranks_per_host: int = 8,
    roles: Sequence[str] = ("actor", "rollout", "ref"),
    regions: Sequence[RegionSpec] = GRPO_REGIONS,
    mode: str = "e2e",
    tools: Sequence[str] = ("torch",),
    trace_bytes: int = 0,
    sparse: bool = False,
    slow: Mapping[tuple[int, str], float] | None = None,
    jitter: float = 0.02,
    seed: int = 0,
    unfinalized: Sequence[int] = (),
    start_ns: int = START_NS,
    replicas: int = 0,
    slow_replicas: Mapping[int, float] | None = None,
) -> Path:
    """Write the run and return its directory ``<save_path>/<run_id>``.

    :param ranks: how many ranks (0..n-1) or which; each is one process hosting ``roles``.
    :param ranks_per_host: ranks ``0..k-1`` are on host ``node0``, the next ``k`` on ``node1``...
    :param trace_bytes: total bytes of trace files, spread evenly over every capture's file.
    :param sparse: make trace files holes (no disk blocks) instead of written filler.
    :param slow: ``{(rank, region): factor}`` — that rank's region takes ``factor`` times as long.
    :param jitter: relative random spread of every duration (fixed by ``seed``).
    :param unfinalized: ranks whose process "died": no ``finalized`` record.
    :param replicas: rollout replica processes (agent-loop mode); then the ``rollout`` regions run on them, not on the ranks.
    :param slow_replicas: ``{replica: factor}`` — that replica's rollout regions take ``factor`` times as long.
    """
    rank_list = list(range(ranks)) if isinstance(ranks, int) else list(ranks)
    run_dir = Path(save_path) / run_id
    rng = random.Random(seed)
    slow = dict(slow or {})
    slow_replicas = dict(slow_replicas or {})
    period_ms = _period_ms(regions, [*slow.values(), *slow_replicas.values()], jitter)
    generation: dict[int, dict[str, list[tuple[int, int]]]] = {}
    """step -> rollout region -> each replica's (start_ns, end_ns); empty without replicas."""
    if replicas:
        generation = _write_replicas(run_dir, run_id, save_path, replicas, steps, regions, tools, slow_replicas,
                                     jitter, random.Random(seed + 1), start_ns, period_ms)
        roles = [r for r in roles if r != "rollout"]
    captures = _captures_per_process(steps, [r for r in regions if not (replicas and r.role == "rollout")], mode)
    per_file = trace_bytes // max(1, len(rank_list) * len(captures) * len(tools))
    for rank in rank_list:
        host, pid = f"node{rank // max(1, ranks_per_host)}", 1000 + rank
        tag = f"rank{rank}-{host}-{pid}"
        writer = ManifestWriter(run_dir / "manifest" / f"{tag}.jsonl", {"run": run_id, "rank": rank, "host": host, "pid": pid})
        writer.write_record(ProcessRecord(world_size=len(rank_list), roles=list(roles), selected_roles=list(roles),
                                          steps=list(steps), mode=mode, tools=list(tools),
                                          save_path=str(Path(save_path).absolute()), expected_captures=len(captures)))
        for index, step in enumerate(steps):
            step_start = start_ns + int(index * period_ms * 1e6) + rng.randrange(0, 200_000)
            cursor = step_start + int(0.5e6)
            opened: dict[str, int] = {}
            closing: list[tuple[int, dict]] = []
            for spec in regions:
                ms = spec.ms * slow.get((rank, spec.region), 1.0) * (1 + rng.uniform(-jitter, jitter))
                if replicas and spec.role == "rollout":  # ran in the replicas: wait for the slowest
                    ends = [end for _, end in generation.get(step, {}).get(spec.region, [])]
                    cursor = max([cursor] + [end + int(GAP_MS * 1e6) for end in ends])
                    continue
                if spec.parent is None:
                    begin = cursor
                    cursor = begin + int(ms * 1e6) + int(GAP_MS * 1e6)
                else:
                    begin = opened[spec.parent] + int(spec.offset_ms * 1e6)
                end = begin + int(ms * 1e6)
                opened[spec.region] = begin
                capture = f"step{step}" if mode == "e2e" else f"step{step}.{spec.parent or spec.region}"
                closing.append((end, {
                    "step": step, "role": spec.role, "region": spec.region, "parent": spec.parent,
                    "depth": 0 if spec.parent is None else 1, "capture": capture, "start_ns": begin, "end_ns": end,
                    "duration_ms": round((end - begin) / 1e6, 6), "iterations": list(spec.iterations) if spec.iterations else None,
                    "marked_iterations": (spec.iterations[1] + 1) if spec.iterations else 0, "error": None,
                }))
            # a region is recorded when it closes: children before their parent
            closing.sort(key=lambda item: (item[0], -item[1]["depth"]))
            parent_end = {fields["region"]: end for end, fields in closing if fields["depth"] == 0}
            for end, fields in closing:
                if fields["parent"] is not None:  # a child never outlives its parent
                    end = min(end, parent_end[fields["parent"]])
                    fields.update(end_ns=end, duration_ms=round((end - fields["start_ns"]) / 1e6, 6))
                writer.write("region", **fields)
            step_end = cursor + int(0.5e6)
            writer.write("step", step=step, start_ns=step_start, end_ns=step_end, duration_ms=round((step_end - step_start) / 1e6, 6))
            for capture, capture_roles, region in captures:
                if not capture.startswith(f"step{step}") or capture[len(f"step{step}"):][:1] not in ("", "."):
                    continue
                for tool in tools:
                    rel = Path(capture) / tag / tool / f"rank{rank}.pt.trace.json.gz"
                    _write_filler(run_dir / rel, per_file, sparse)
                    writer.write("artifact", backend=tool, step=step, steps=[step], roles=capture_roles, region=region,
                                 capture=capture, mode=mode, iterations=None, world_size=len(rank_list), path=str(rel),
                                 size=per_file, kind="file", outside_output_dir=False)
        if rank not in unfinalized:
            writer.write("finalized", reason="end", artifacts=len(captures) * len(tools), errors=0)
        writer.close()
    return run_dir


def _write_replicas(run_dir: Path, run_id: str, save_path, replicas: int, steps: Sequence[int], regions: Sequence[RegionSpec],
                    tools: Sequence[str], slow: dict[int, float], jitter: float, rng: random.Random,
                    start_ns: int, period_ms: float) -> dict[int, dict[str, list[tuple[int, int]]]]:
    """Write each replica's manifest; return when each replica ran each rollout region of each step.

    Each rollout region starts where the trainer reaches it (the top-level regions before it at their
    nominal length); a replica writes a discrete capture per rollout region and a ``step`` record
    from the start of its first to the end of its last."""
    windows: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for replica in range(replicas):
        host, pid = "node0", 2000 + replica
        tag = f"rank{replica}-{host}-{pid}"
        writer = ManifestWriter(run_dir / "manifest" / f"{tag}.jsonl", {"run": run_id, "rank": replica, "host": host, "pid": pid})
        rollout = [r for r in regions if r.role == "rollout" and r.parent is None]
        writer.write_record(ProcessRecord(world_size=replicas, roles=["rollout"], selected_roles=["rollout"], steps=list(steps),
                                          mode="discrete", tools=list(tools), save_path=str(Path(save_path).absolute()),
                                          replica_rank=replica, expected_captures=len(steps) * len(rollout)))
        for index, step in enumerate(steps):
            cursor = start_ns + int(index * period_ms * 1e6) + int(0.5e6)
            first = last = None
            for spec in (r for r in regions if r.parent is None):
                if spec.role != "rollout":
                    cursor += int((spec.ms + GAP_MS) * 1e6)
                    continue
                ms = spec.ms * slow.get(replica, 1.0) * (1 + rng.uniform(-jitter, jitter))
                begin, end = cursor, cursor + int(ms * 1e6)
                first, last = (begin if first is None else first), end
                windows.setdefault(step, {}).setdefault(spec.region, []).append((begin, end))
                capture = f"step{step}.{spec.region}"
                writer.write("region", step=step, role="rollout", region=spec.region, parent=None, depth=0, capture=capture,
                             start_ns=begin, end_ns=end, duration_ms=round((end - begin) / 1e6, 6),
                             iterations=list(spec.iterations) if spec.iterations else None,
                             marked_iterations=(spec.iterations[1] + 1) if spec.iterations else 0, error=None)
                cursor = end + int(GAP_MS * 1e6)
                for tool in tools:
                    rel = Path(capture) / tag / tool / f"replica{replica}.trace.json.gz"
                    _write_filler(run_dir / rel, 0, True)
                    writer.write("artifact", backend=tool, step=step, steps=[step], roles=["rollout"], region=spec.region,
                                 capture=capture, mode="discrete", iterations=None, world_size=replicas, path=str(rel), size=0,
                                 kind="file", outside_output_dir=False)
            if first is not None:
                writer.write("step", step=step, start_ns=first, end_ns=last, duration_ms=round((last - first) / 1e6, 6))
        writer.write("finalized", reason="end", artifacts=len(steps) * len(rollout) * len(tools), errors=0)
        writer.close()
    return windows


def _captures_per_process(steps: Sequence[int], regions: Sequence[RegionSpec], mode: str) -> list[tuple[str, list[str], str | None]]:
    """``(capture id, roles, region)`` of every capture one process writes: one per step (end-to-end)
    or one per top-level region per step (discrete; nested regions are ranges inside their parent's)."""
    if mode == "e2e":
        roles = list(dict.fromkeys(r.role for r in regions))
        return [(f"step{s}", roles, None) for s in steps]
    return [(f"step{s}.{r.region}", [r.role], r.region) for s in steps for r in regions if r.parent is None]


def _period_ms(regions: Sequence[RegionSpec], factors: Sequence[float], jitter: float) -> float:
    """From one step's start to the next's: the longest a step can take (every region at the
    slowest factor and jitter), then 50 ms apart, so steps never overlap."""
    longest = sum(r.ms + GAP_MS for r in regions if r.parent is None) + 1.0
    return longest * max([1.0, *factors]) * (1 + jitter) + 50.0


FILLER = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 1},\n' * 11_000
"""About 1 MiB of trace-like text: what written (not sparse) stand-in trace files are made of."""


def _write_filler(path: Path, size: int, sparse: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        if sparse:
            handle.truncate(size)
            return
        left = size
        while left > 0:
            chunk = FILLER[:left]
            handle.write(chunk)
            left -= len(chunk)
