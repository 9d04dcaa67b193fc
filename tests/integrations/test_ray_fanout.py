"""The controller's table of what became of each worker (:mod:`rlprof.integrations.ray_fanout`), on a
stand-in for Ray: which worker is live, stuck, dead or finished is one fact, and ``dead``,
``unresponsive``, ``handles`` and ``pending`` all read it. (Real actors: test_ray_unresponsive.py.)"""

from __future__ import annotations

import sys
import types

import pytest

from rlprof.ray import ProfilingController, WorkerSpec


class ActorDied(Exception):
    pass


class Ref:
    def __init__(self, outcome, value=None):
        self.outcome, self.value = outcome, value

    def result(self):
        if self.outcome == "died":
            raise ActorDied("the actor is gone")
        if self.outcome == "error":
            raise ValueError("the call raised")
        return self.value


def fake_ray(alive_nodes=()):
    def wait(refs, num_returns, timeout):
        return [r for r in refs if r.outcome != "hang"], [r for r in refs if r.outcome == "hang"]

    return types.SimpleNamespace(wait=wait, get=lambda ref, timeout=None: ref.result(),
                                 exceptions=types.SimpleNamespace(RayActorError=ActorDied),
                                 nodes=lambda: [{"NodeID": n, "Alive": True} for n in alive_nodes])


class Handle:
    """An actor handle whose calls answer as ``script[(call, step)]`` says (default: at once, None)."""

    def __init__(self, script=None, node=None):
        self.script = script or {}
        self.node = node
        self.calls = []
        self.step = None

    def __getattr__(self, name):
        def remote(*args, **kwargs):
            self.calls.append(name)
            if name == "rlprof_start_step":
                self.step = args[0]
            outcome = self.script.get((name, self.step), "ok")
            value = {"rlprof_finalize": [{"kind": "pending", "path": "w.nsys-rep"}],
                     "rlprof_setup": {"node": self.node, "host": f"host-{self.node}"}}.get(name)
            return outcome if isinstance(outcome, Ref) else Ref(outcome, value)

        return types.SimpleNamespace(remote=remote)


@pytest.fixture
def ray_stand_in(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", fake_ray())


def test_each_worker_has_one_state_and_every_view_reads_it(ray_stand_in, test_backends, tmp_path):
    late = Ref("hang")
    handles = [Handle(), Handle({("rlprof_step_boundary", 1): late}), Handle({("rlprof_start_step", 2): "died"})]
    config = {"global_profiler": {"tool": "recorder", "steps": [1, 2], "save_path": str(tmp_path)},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    controller = ProfilingController(config, [(WorkerSpec(rank=r, world_size=3, roles=("actor",)), h)
                                              for r, h in enumerate(handles)])
    controller.start_step(1)
    assert [f.kind for f in controller.step_boundary().failures] == ["timeout"]
    assert set(controller.unresponsive) == {"workers/rank1"} and controller.dead == frozenset()

    late.outcome = "ok"  # its stuck call ends: it is waited for again from the next fan-out on
    second = controller.start_step(2)
    assert [(f.worker, f.kind) for f in second.failures] == [("workers/rank2", "died")]
    assert controller.unresponsive == {} and controller.dead == {"workers/rank2"}
    assert controller.handles == handles[:2]

    final = controller.finalize()
    assert set(final.results) == {"workers/rank0", "workers/rank1"}
    assert set(controller.pending) == {"workers/rank0", "workers/rank1"}  # the dead worker finished nothing
    assert "rlprof_finalize" not in handles[2].calls
    assert [(f.worker, f.kind) for f in controller.failures] == [("workers/rank1", "timeout"), ("workers/rank2", "died")]


def test_a_stuck_worker_is_skipped_but_still_told_to_finalize(ray_stand_in, test_backends, tmp_path):
    hung = Handle({("rlprof_step_boundary", 1): "hang"})
    config = {"global_profiler": {"tool": "recorder", "steps": [1], "save_path": str(tmp_path)},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    controller = ProfilingController(config, [(WorkerSpec(rank=0, world_size=1, roles=("actor",)), hung)])
    controller.start_step(1)
    controller.step_boundary()
    final = controller.finalize()
    assert final.skipped == ["workers/rank0"] and final.failures == []
    assert hung.calls[-1] == "rlprof_finalize"  # sent without waiting, queued behind the stuck call
    assert controller.pending == {} and set(controller.unresponsive) == {"workers/rank0"}


def test_a_lost_node_is_said_once_with_its_workers_and_the_last_step_they_delivered(monkeypatch, test_backends, tmp_path):
    from rlprof.manifest import read_records

    monkeypatch.setitem(sys.modules, "ray", fake_ray(alive_nodes=["nodeB"]))
    handles = [Handle({("rlprof_start_step", 2): "died"}, node="nodeA"),
               Handle({("rlprof_start_step", 2): "died"}, node="nodeA"), Handle(node="nodeB")]
    config = {"global_profiler": {"tool": "recorder", "steps": [1, 2], "save_path": str(tmp_path)},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    controller = ProfilingController(config, [(WorkerSpec(rank=r, world_size=3, roles=("actor",)), h)
                                              for r, h in enumerate(handles)])
    controller.setup()
    controller.start_step(1)
    controller.step_boundary()
    controller.start_step(2)
    controller.finalize()
    lost = [r for r in read_records([tmp_path]) if r["type"] == "node_lost"]
    assert [(r["node"], r["node_host"], r["workers"], r["step"]) for r in lost] == [
        ("nodeA", "host-nodeA", ["workers/rank0", "workers/rank1"], 1)]
