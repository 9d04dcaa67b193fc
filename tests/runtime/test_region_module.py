"""The model a region runs reaches the backends: ``prof.role(role, stage, module=model)`` ->
``RoleContext.module`` at start_role and stop_role (None when the trainer named none), and a closed
region does not keep the model alive."""

from __future__ import annotations

import gc
import weakref

import rlprof


class Model:
    """Stands for a torch.nn.Module: the core never looks inside it."""


class Spy:
    def __init__(self):
        self.seen: list[tuple[str, str, object]] = []

    @rlprof.hookimpl
    def start_role(self, ctx):
        self.seen.append(("start_role", ctx.region, ctx.module))

    @rlprof.hookimpl
    def stop_role(self, ctx):
        self.seen.append(("stop_role", ctx.region, ctx.module))


def profiler(save_path, spy, mode="false"):
    return rlprof.Profiler(None, roles=("actor", "ref"), backends={"spy": spy}, overrides=[
        "global_profiler.tool=spy", "global_profiler.steps=[1,2]", f"global_profiler.save_path={save_path}",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        f"actor_rollout_ref.actor.profiler.discrete={mode}"])


def test_the_module_given_to_a_region_is_the_backends_ctx_module_in_both_modes(save_path):
    for mode in ("false", "true"):
        spy, model = Spy(), Model()
        prof = profiler(save_path / mode, spy, mode)
        prof.start_step(1)
        with prof.role("ref", "compute_log_prob"):
            pass
        with prof.role("actor", "update", module=model):
            pass
        prof.step_boundary()
        prof.finalize()
        assert spy.seen == [("start_role", "ref_compute_log_prob", None), ("stop_role", "ref_compute_log_prob", None),
                            ("start_role", "actor_update", model), ("stop_role", "actor_update", model)], mode


def test_a_decorated_region_keeps_its_module_and_a_later_one_replaces_it(save_path):
    spy, first, second = Spy(), Model(), Model()
    prof = profiler(save_path, spy)

    @prof.role("actor", "update", module=first)
    def update():
        pass

    prof.start_step(1)
    update()
    prof.step_boundary()
    prof.start_step(2)
    with prof.role("actor", "update", module=second):
        pass
    update()  # the same region object: the module given last
    prof.step_boundary()
    prof.finalize()
    assert [m for hook, _, m in spy.seen if hook == "start_role"] == [first, second, second]


def test_a_closed_region_does_not_keep_its_model_alive(save_path):
    spy, model = Spy(), Model()
    prof = profiler(save_path, spy)
    prof.start_step(1)
    with prof.role("actor", "update", module=model):
        pass
    spy.seen.clear()
    prof._regions.clear()  # the trainer dropped its region objects (a worker rebuilt), inside the step
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None
    prof.step_boundary()
    prof.finalize()
