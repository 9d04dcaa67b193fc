"""Run verl 0.9.1's real trainer (``python -m verl.trainer.main_ppo``) on this CPU.

    python examples/verl-cpu/run.py --out DIR [--steps 3] [--rlprof] [--critic] [--async] [hydra overrides...]

Builds the tiny model, tokenizer and data into DIR/assets (once; see build_assets.py), then runs
GRPO with verl's V1 sync trainer, FSDP2 engine workers on gloo, the agent-loop rollout through the
``hf`` replica server, and TransferQueue. ``verl_cpu_bridge`` (through verl's
``VERL_USE_EXTERNAL_MODULES``) supplies the CPU platform, the ``hf`` rollout and the gloo fixes.

--rlprof     run under ``python -m rlprof.verl`` (rlprof's drop-in for verl's profiler classes)
--critic     GAE with a critic, plus a reference policy through the KL loss
--async      verl's fully async trainer (``fully_async_main``): rollouter and trainer on their own
             resources, weights through the gloo checkpoint engine, --steps parameter versions
--mode M     verl's V1 trainer mode (``trainer.v1.trainer_mode``): sync (the default), colocate_async,
             separate_async (a standalone replica on its own fake GPU; see modes.py)
--switch     with --mode separate_async: lend the trainer's own replica to generation while it waits
             (``hybrid_rollout.enable_switch``)
--nsys       with --rlprof: Nsight Systems on this CPU, workers under ``nsys profile`` with rlprof's NVTX
             capture windows (see ``nsys_overrides``; add ``global_profiler.steps`` and the capture-range-end)
Extra arguments are hydra overrides appended last (they win). The exit status is verl's; 2 when the run
cannot start here (an interpreter without verl's packages, a RAY_TMPDIR too long for Ray's sockets).

Ray's temp dir is DIR/ray, unless Ray's sockets under it would pass the 107-byte limit of a Unix socket
path (a DIR longer than about 35 characters): then it is a short directory under /tmp, and DIR/ray a link
to it (see :func:`ray_temp_dir`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NEEDED = ("verl", "tokenizers", "ray", "torch", "transfer_queue")
"""What the trainer imports that a bare system python lacks: checked before anything is built."""
SOCKET_PATH_LIMIT = 107
"""The longest Unix socket path Ray accepts on Linux (108 bytes with the closing NUL)."""
LONGEST_RAY_SOCKET = os.path.join("ray", "session_2026-01-01_00-00-00_000000_4194304", "sockets", "plasma_store.99")
"""The longest socket path Ray makes under its temp dir: ``ray/session_<date>_<pid>/sockets/plasma_store[.N]``."""


def overrides(assets: dict, out: str, steps: int, critic: bool) -> list[str]:
    ov = [
        # data: 4 prompts a step, 4 samples each
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['val']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=96",
        "data.max_response_length=32",
        "data.filter_overlong_prompts=true",
        "data.truncation=left",
        "data.dataloader_num_workers=0",
        # model and actor: FSDP2 on gloo, no flash-attention, no unpadding kernels
        f"actor_rollout_ref.model.path={assets['model']}",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        # rollout: the hf replica server behind verl's agent loop
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.max_model_len=128",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "actor_rollout_ref.rollout.load_format=auto",
        # reward: gsm8k rule score plus a shaping term (reward.py)
        f"reward.custom_reward_function.path={os.path.join(HERE, 'reward.py')}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        # trainer: one fake GPU (Ray bookkeeping), V1 sync mode
        "trainer.use_v1=true",
        "trainer.v1.trainer_mode=sync",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        "trainer.device=cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=100",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        "trainer.project_name=verl-cpu",
        "trainer.experiment_name=grpo",
        f"trainer.default_local_dir={os.path.join(out, 'checkpoints')}",
        "+ray_kwargs.ray_init.num_gpus=1",
        "+ray_kwargs.ray_init.num_cpus=16",
        # TransferQueue: the default 8 storage units hang on 2 cores
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]
    if critic:
        ov += [
            "algorithm.adv_estimator=gae",
            f"critic.model.path={assets['model']}",
            "critic.model.use_remove_padding=false",
            "critic.model.enable_gradient_checkpointing=false",
            "+critic.model.override_config.attn_implementation=eager",
            "critic.strategy=fsdp2",
            "critic.ppo_mini_batch_size=4",
            "critic.ppo_micro_batch_size_per_gpu=8",
            "critic.optim.lr=1e-3",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.actor.kl_loss_coef=0.01",
            "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        ]
    else:
        ov += ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.use_kl_loss=false"]
    return ov


NSIGHT = "global_profiler.global_tool_config.nsys.worker_nsight_options"


def nsys_overrides() -> list[str]:
    """``global_profiler.tool=nsys`` for a machine without CUDA, under rlprof (with ``--rlprof``).

    verl's default worker options wait for cudaProfilerStart and trace CUDA; here the workers trace
    NVTX and capture rlprof's NVTX windows (the range ``rlprof_capture`` in the domain ``rlprof``;
    rlprof-nsys opens its windows as the nsys around the worker waits for them). Without rlprof
    nothing opens such a window, so verl's own nsys profiler writes nothing. On a host without
    hardware performance counters nsys 2022.4's CPU sampling never finishes: sampling is then off.
    ``capture-range-end`` is left to the caller: ``repeat-shutdown:N``, N the windows a worker opens
    (one per profiled step end-to-end), else verl's default of 6 per step.
    """
    ov = [
        "global_profiler.tool=nsys",
        f"{NSIGHT}.trace=nvtx",
        f"{NSIGHT}.capture-range=nvtx",
        f"+{NSIGHT}.nvtx-capture=rlprof_capture@rlprof",
        f"~{NSIGHT}.cuda-memory-usage",
        f"~{NSIGHT}.cuda-graph-trace",
    ]
    try:
        from rlprof_nsys.cpu_sampling import sampling_problem
    except ImportError:  # without rlprof-nsys: assume the worst, a run that never ends is worse
        problem = "rlprof-nsys is not installed"
    else:
        problem = sampling_problem()
    if problem:
        ov += [f"+{NSIGHT}.sample=none", f"+{NSIGHT}.cpuctxsw=none"]
    return ov


def missing_packages() -> list[str]:
    """The modules of :data:`NEEDED` this interpreter cannot import (found without importing them)."""
    import importlib.util

    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def fits_ray_sockets(temp_dir: str) -> bool:
    """Whether Ray's sockets under ``temp_dir`` (``RAY_TMPDIR``) stay within :data:`SOCKET_PATH_LIMIT`."""
    return len(os.path.join(temp_dir, LONGEST_RAY_SOCKET).encode()) <= SOCKET_PATH_LIMIT


class CannotStart(Exception):
    """The run cannot start as asked; the message says why and what to do (exit status 2)."""


def ray_temp_dir(out: str, env: dict) -> str:
    """Ray's temp dir for this run: ``RAY_TMPDIR`` when the caller set one (refused when too long for Ray's
    sockets), else ``OUT/ray``, else (OUT too long) a new short directory under /tmp with ``OUT/ray`` a link
    to it, so Ray's files are still found under OUT."""
    given = env.get("RAY_TMPDIR")
    if given:
        if not fits_ray_sockets(given):
            raise CannotStart(f"RAY_TMPDIR={given} is too long: Ray's sockets under it "
                              f"({os.path.join(given, LONGEST_RAY_SOCKET)}) would pass the {SOCKET_PATH_LIMIT}-byte limit of a "
                              f"Unix socket path; set a shorter RAY_TMPDIR, or unset it")
        return given
    inside = os.path.join(out, "ray")
    if fits_ray_sockets(inside):
        return inside
    base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
    if not fits_ray_sockets(os.path.join(base, "ray-xxxxxxxx")):
        raise CannotStart(f"neither {inside} nor a directory under {base} is short enough for Ray's sockets "
                          f"({SOCKET_PATH_LIMIT}-byte limit of a Unix socket path); set RAY_TMPDIR to a short directory")
    short = tempfile.mkdtemp(prefix="ray-", dir=base)
    if os.path.islink(inside):
        os.unlink(inside)  # the link an earlier run left (its directory may be gone)
    if not os.path.lexists(inside):
        os.symlink(short, inside)
    print(f"[verl-cpu] Ray's temp dir: {short} ({inside} would put Ray's sockets past the {SOCKET_PATH_LIMIT}-byte limit "
          f"of a Unix socket path; {inside} links to it)", flush=True)
    return short


def rlprof_command() -> str | None:
    """How this user's shell starts rlprof, worked out here, before :func:`environment` changes PATH for the
    trainer (so the run's closing ``read it: ...`` line runs when pasted); None without rlprof."""
    try:
        from rlprof.invocation import rlprof_command as command
    except ImportError:
        return None
    return command(sys.argv[0])


def environment(out: str) -> dict:
    env = dict(os.environ)
    command = rlprof_command()
    if command:
        env.setdefault("RLPROF_COMMAND", command)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.update(
        # the bridge, then any modules of yours already named there
        VERL_USE_EXTERNAL_MODULES=",".join(["verl_cpu_bridge", *(m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",")
                                                                 if m and m != "verl_cpu_bridge")]),
        VERL_PLATFORM="cpu",
        VERL_ENGINE_DEVICE="cuda",  # selects the FSDP engine class (registered for cuda)
        PYTHONPATH=os.pathsep.join(p for p in (HERE, env.get("PYTHONPATH", "")) if p),
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
        RAY_DEDUP_LOGS="0",
        HYDRA_FULL_ERROR="1",
        # Ray's nsight plugin starts a worker as `nsys profile ... python ...`: this interpreter's python
        PATH=os.pathsep.join(p for p in (os.path.dirname(sys.executable), env.get("PATH", "")) if p),
    )
    env["RAY_TMPDIR"] = ray_temp_dir(out, env)
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="working directory (assets, logs, checkpoints)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rlprof", action="store_true", help="run under python -m rlprof.verl")
    p.add_argument("--critic", action="store_true", help="GAE with a critic and a reference policy (KL loss)")
    p.add_argument("--nsys", action="store_true", help="Nsight Systems on this CPU (NVTX capture windows)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the assets")
    p.add_argument("--async", dest="fully_async", action="store_true",
                   help="verl's fully async trainer (fully_async.py); --steps counts parameter versions")
    p.add_argument("--mode", default="sync", choices=("sync", "colocate_async", "separate_async"),
                   help="verl's V1 trainer mode (trainer.v1.trainer_mode; modes.py)")
    p.add_argument("--switch", action="store_true",
                   help="--mode separate_async: lend the trainer's replica to generation (hybrid_rollout.enable_switch)")
    a, extra = p.parse_known_args(argv)
    if a.fully_async and (a.mode != "sync" or a.switch):
        p.error("--async runs verl's fully async trainer, which has no V1 trainer mode: leave out --mode and --switch")
    if a.switch and a.mode != "separate_async":
        p.error("--switch needs --mode separate_async")
    missing = missing_packages()
    if missing:
        print(f"[verl-cpu] this interpreter ({sys.executable}) cannot import {', '.join(missing)}: run the example with "
              f"the venv's python that scripts/setup.sh set up, e.g. .venv/bin/python examples/verl-cpu/run.py ...",
              file=sys.stderr)
        return 2

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    try:
        env = environment(out)
    except CannotStart as why:
        print(f"[verl-cpu] {why}", file=sys.stderr)
        return 2
    assets_dir = os.path.join(out, "assets")
    info_path = os.path.join(assets_dir, "assets.json")
    if a.rebuild or not os.path.exists(info_path):
        sys.path.insert(0, HERE)
        import build_assets

        build_assets.build(assets_dir)
    with open(info_path) as f:
        assets = json.load(f)

    module, ov = "verl.trainer.main_ppo", overrides(assets, out, a.steps, a.critic)
    if a.mode != "sync":
        sys.path.insert(0, HERE)
        import modes

        ov = modes.overrides(ov, a.mode, a.switch)
    if a.fully_async:
        sys.path.insert(0, HERE)
        import fully_async

        module, ov = fully_async.MODULE, fully_async.overrides(ov, a.steps)
    cmd = [sys.executable, "-m"] + (["rlprof.verl", module] if a.rlprof else [module])
    cmd += ov + (nsys_overrides() if a.nsys else []) + list(extra)
    os.makedirs(env["RAY_TMPDIR"], exist_ok=True)
    print("+ " + shlex.join(cmd), flush=True)
    t0 = time.monotonic()
    rc = fully_async.run(cmd, env, out) if a.fully_async else subprocess.call(cmd, env=env, cwd=out)
    print(f"[verl-cpu] exit {rc} after {time.monotonic() - t0:.1f} s", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
