"""verl 0.9.1's fully async trainer (``verl.experimental.fully_async_policy.fully_async_main``) on this CPU.

Drives ``examples/verl-cpu/run.py --async`` (see examples/verl-cpu/README.md, "The fully async
trainer"): the rollouter with one standalone ``hf`` replica in its own resource pool, the trainer with
its FSDP2 worker in another, verl's message queue between them, a staleness threshold of 1, and the
trainer's weights sent to the replica after every step through verl's checkpoint engine (the example's
``gloo`` engine; verl's ``nccl`` needs CUDA). What a user must get: training runs every parameter
version and exits 0, every weight sync reaches the replica, which then generates with the new
version, and generation overlaps training: the replica generates while the trainer computes a step
(the replica's own records against verl's own timing), and the trainer trains on samples generated
with older weights (verl's own ``stale_trajectory_processed``). One run takes about 100 s here.

The gloo engine itself is checked on its own too: bucketed, chunked, mixed-dtype weights arrive
whole over a real gloo group.
"""

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

NEEDS = "verl's trainer needs: pip install -r examples/verl-cpu/requirements.txt torch==2.13.0 (scripts/setup.sh does)"
for _module in ("verl.experimental.fully_async_policy.fully_async_main", "transfer_queue", "torchdata", "peft",
                "accelerate", "pylatexenc"):
    pytest.importorskip(_module, reason=f"{_module} is missing; {NEEDS}")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "verl-cpu"
RUN = EXAMPLE / "run.py"
VERSIONS = 4


@pytest.fixture(scope="module")
def example():
    """The example's modules (``fully_async``, ``verl_cpu_checkpoint_engine``), importable as run.py imports them."""
    sys.path.insert(0, str(EXAMPLE))
    yield
    sys.path.remove(str(EXAMPLE))


@pytest.fixture
def out():
    """The run's directory, short and under /tmp: Ray's temp dir lives in it, and a Unix socket path
    may not exceed 107 bytes (pytest's tmp_path is too deep)."""
    path = Path(tempfile.mkdtemp(prefix="rlprof-vfa-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_generation_overlaps_training_and_every_version_reaches_the_replica(out, example):
    import fully_async

    proc = subprocess.run([sys.executable, str(RUN), "--async", "--out", str(out), "--steps", str(VERSIONS)],
                          capture_output=True, text=True, timeout=900, cwd=out)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    log = (out / fully_async.LOG_FILE).read_text()
    assert "Checkpoint manager initialized (backend=gloo)" in log, log[-4000:]
    trained = sorted(int(m[1]) for m in map(fully_async.TRAINER_STEP.search, log.splitlines()) if m)
    assert trained == list(range(1, VERSIONS + 1)), trained

    events = fully_async.server_events(str(out / fully_async.EVENTS_FILE))
    # the sync before training (version 0), then one after each step: the replica paused, loaded, resumed
    syncs = fully_async.syncs(events)
    assert [s["version"] for s in syncs] == list(range(VERSIONS + 1)), syncs
    assert all(s["load_s"] > 0 and s["paused_s"] >= s["load_s"] for s in syncs), syncs
    generated = [e for e in events if e["event"] == "generate"]
    assert {e["version"] for e in generated} >= {0, 1}, sorted({e["version"] for e in generated})
    for e in generated:  # nothing generated while the replica was paused for a sync
        assert not any(s["pause"] < e["t0"] < s["pause"] + s["paused_s"] for s in syncs), e

    # the overlap: the replica generated while the trainer computed a step (verl's train_compute_time_s,
    # ending where verl's trainer printed after the actor update), and verl trained on older samples
    windows = fully_async.trainer_windows(log.splitlines(), near=generated[0]["t0"])
    assert [w.step for w in windows] == list(range(1, VERSIONS)), windows  # verl logs a step's timing a version late
    rows = fully_async.overlap(windows, events)
    assert any(r["generating_s"] > 0 for r in rows), rows
    stale = [float(v) for v in re.findall(r"fully_async/count/stale_trajectory_processed:([\d.]+)", log)]
    assert stale and max(stale) > 0, stale
    assert "[verl-cpu] overlap: training step" in proc.stdout, proc.stdout[-3000:]


def test_gloo_checkpoint_engine_sends_bucketed_weights_whole(example):
    """verl's protocol on two engines of one process (sender and receiver each their own gloo group
    member): prepare, build_topology, init_process_group, send/receive, finalize. A 1 KiB bucket forces
    several buckets and a tensor split in pieces; an odd-sized bf16 tensor before an int64 one checks
    that every piece arrives aligned for its dtype."""
    import torch

    from verl_cpu_checkpoint_engine import GlooCheckpointEngine

    weights = {
        "embed": torch.randn(700),  # 2800 bytes: three pieces of a 1 KiB bucket
        "odd": torch.randn(333).to(torch.bfloat16),
        "ids": torch.arange(7, dtype=torch.int64),
        "bias": torch.randn(5),
    }
    sender, receiver = GlooCheckpointEngine(1024, is_master=True), GlooCheckpointEngine(1024)
    metadata = [sender.prepare(), receiver.prepare()]
    actor_kwargs, rollout_kwargs = GlooCheckpointEngine.build_topology(1, 1, metadata)

    async def sync():
        await asyncio.gather(asyncio.to_thread(sender.init_process_group, **{k: v[0] for k, v in actor_kwargs.items()}),
                             asyncio.to_thread(receiver.init_process_group, **{k: v[0] for k, v in rollout_kwargs.items()}))
        received = {}

        async def receive():
            async for name, tensor in receiver.receive_weights():
                received[name] = tensor.clone()

        await asyncio.gather(sender.send_weights(iter(weights.items())), receive())
        return received

    received = asyncio.run(sync())
    sender.finalize()
    receiver.finalize()
    assert list(received) == list(weights)
    for name, tensor in weights.items():
        assert received[name].dtype == tensor.dtype and torch.equal(received[name], tensor), name
