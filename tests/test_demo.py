"""``rlprof demo``: the flags' meaning, the GRPO pieces, and a real (small) run whose report shows
every profiled step x role x rank."""

import json
import subprocess
import sys

import pytest

from rlprof.config import load_config
from rlprof.demo.command import config_from_flags, parser


def flags(*argv):
    opts = parser().parse_args(list(argv))
    return load_config(config_from_flags(opts), opts.overrides)


def test_flags_become_the_hybrid_roles_profiler_config():
    config = flags("--tool", "torch,torch_memory", "--steps", "2,3", "--ranks", "1", "--discrete",
                   "--schedule", "active=1,wait=2", "--save-path", "out")
    assert config.global_.tools == ("torch", "torch_memory") and config.global_.steps == (2, 3)
    assert config.global_.save_path == "out"
    for role in ("actor", "rollout", "ref"):
        r = config.roles[role]
        assert (r.enable, r.ranks, r.all_ranks, r.discrete) == (True, (1,), False, True)
        assert (r.schedule.active, r.schedule.wait) == (1, 2)
    assert not config.roles["critic"].enable
    default = flags()
    assert default.global_.tools == ("torch",) and default.global_.steps == (1, 2)
    assert all(default.roles[r].all_ranks for r in ("actor", "rollout", "ref"))


def test_dotted_overrides_win_over_the_flags():
    config = flags("--steps", "1", "global_profiler.steps=[3]", "actor_rollout_ref.ref.profiler.enable=false")
    assert config.global_.steps == (3,)
    assert not config.roles["ref"].enable and config.roles["actor"].enable


def test_grpo_pieces():
    torch = pytest.importorskip("torch")
    from rlprof.demo.grpo import Sizes, TinyPolicy, generate, group_advantages, response_log_probs

    sizes = Sizes()
    policy = TinyPolicy(sizes)
    prompts = torch.randint(sizes.vocab, (3, sizes.prompt_len))
    marks = []

    class Mark:
        def __enter__(self):
            marks.append(1)

        def __exit__(self, *exc):
            return False

    responses = generate(policy, prompts, sizes.response_len, torch.Generator().manual_seed(0), Mark)
    assert responses.shape == (3, sizes.response_len) and len(marks) == sizes.response_len  # one iteration per decode step
    assert response_log_probs(policy, prompts, responses).shape == (3, sizes.response_len)
    advantages = group_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5, 2.0, 4.0]), group_size=2)
    assert torch.allclose(advantages.view(3, 2).sum(dim=1), torch.zeros(3), atol=1e-5)


@pytest.mark.slow
def test_demo_run_reports_every_profiled_step_role_rank(tmp_path):
    pytest.importorskip("ray")
    pytest.importorskip("rlprof_torch")
    save = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "rlprof.cli", "demo", "--workers", "2", "--steps", "1,2",
                           "--save-path", str(save)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "problems: none" in out and "rlprof demo: ok" in out
    assert "https://ui.perfetto.dev" in out and out.count(".pt.trace.json.gz") == 4  # 2 steps x 2 ranks
    for step in (1, 2):
        assert f"step {step} (profiled)  actor update" in out
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", str(save), "--json"], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    [run] = json.loads(report.stdout)["runs"]
    rows = {(r["step"], r["role"], r["rank"]): r for r in run["rows"]}
    assert set(rows) == {(s, role, rank) for s in (1, 2) for role in ("actor", "rollout", "ref") for rank in (0, 1)}
    for (step, role, rank), row in rows.items():
        assert row["ranges"] and all(name.startswith(role + "_") and v["ms"] > 0 for name, v in row["ranges"].items())
    assert set(rows[1, "actor", 0]["ranges"]) == {"actor_compute_log_prob", "actor_update"}
