"""``rlprof demo --async``: its flags, what it refuses before Ray starts, and the sample queue's rules
(rlprof.demo.samples), apart from Ray. A real run is checked in tests/analysis/test_overlap_demo.py."""

from __future__ import annotations

import asyncio

import pytest

from rlprof.config import load_config
from rlprof.cli.demo import main, parser
from rlprof.demo.command import config_from_flags, steps_flag
from rlprof.demo.samples import Group, SampleQueue, StalenessLimit


def flags(*argv):
    opts = parser().parse_args(list(argv))
    return opts, load_config(config_from_flags(opts), opts.overrides)


def test_async_profiles_versions_2_and_3_of_actor_and_rollout_by_default():
    opts, config = flags("--async")
    assert steps_flag(opts) == "2,3" and config.global_.steps == (2, 3)
    assert config.roles["actor"].enable and config.roles["rollout"].enable
    from rlprof.demo.async_trainer import TRAINER_ROLES

    assert TRAINER_ROLES == ("actor",)  # no process hosts ref (its section, following actor's, selects nothing)
    assert not config.agent_loop  # the replicas capture one window per version, end-to-end
    assert flags()[1].global_.steps == (1, 2)  # the synchronous demo keeps its default
    assert flags("--async", "--steps", "1,4")[1].global_.steps == (1, 4)


@pytest.mark.parametrize("argv, said", [
    (("--discrete",), "--async with --discrete: not supported"),
    (("--rollout", "vllm"), "--async with --rollout vllm: not supported"),
    (("--workers", "2", "--nodes", "2"), "--async with --nodes 2: not supported"),
    (("--staleness", "-1"), "--staleness: got -1; allowed: 0 or more"),
    (("--replicas", "0"), "--replicas: got 0; allowed: 1 or more"),
])
def test_what_async_cannot_do_is_refused_before_ray_starts(argv, said, tmp_path, capsys):
    assert main(["--async", *argv, "--save-path", str(tmp_path / "out")]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_staleness_limit():
    limit = StalenessLimit(batch=8, staleness=1, capacity=16, last_step=4)
    assert limit.held_by(version=0, admitted=15, taken=0) is None  # steps 1 and 2 from the initial weights
    assert limit.held_by(version=0, admitted=16, taken=8) == "staleness"  # step 3's would be 2 versions behind
    assert limit.held_by(version=1, admitted=16, taken=8) is None
    assert limit.held_by(version=5, admitted=24, taken=8) == "queue full"
    assert limit.held_by(version=9, admitted=32, taken=32) == "run complete"  # no step takes more
    none = StalenessLimit(batch=8, staleness=0, capacity=8, last_step=4)
    assert none.held_by(version=0, admitted=8, taken=0) == "staleness"  # no overlap: step 2 waits for version 1
    with pytest.raises(ValueError, match="staleness -1"):
        StalenessLimit(batch=8, staleness=-1, capacity=8, last_step=4)


def test_the_queue_hands_each_rank_its_share_in_order_and_a_sync_ends_a_hold():
    async def scenario():
        queue = SampleQueue(StalenessLimit(batch=4, staleness=0, capacity=4, last_step=2), ranks=2)
        groups = [Group(prompt=i, responses=None, log_probs=None, version=0, replica_rank=i % 2) for i in range(4)]
        assert [await queue.admit(g.replica_rank, 0) for g in groups] == [True] * 4
        assert await queue.admit(0, 0) is False  # step 2's samples need version 1 (staleness 0)
        held = asyncio.ensure_future(queue.admit(0, 0, wait_s=10))
        await asyncio.sleep(0.01)
        await queue.interrupt(0, 1)  # a sync to version 1 is on its way: the hold ends at once
        assert await asyncio.wait_for(held, 1) is False
        takers = [asyncio.ensure_future(queue.take(1, rank, timeout_s=10)) for rank in (1, 0)]
        for g in groups:
            await queue.put(g)
        shares = await asyncio.gather(*takers)
        assert [[g.prompt for g in share] for share in shares] == [[2, 3], [0, 1]]
        assert await queue.admit(0, 1) is True  # version 1 may make step 2's samples
        with pytest.raises(asyncio.TimeoutError):
            await queue.take(2, 0, timeout_s=0.05)

    asyncio.run(scenario())
