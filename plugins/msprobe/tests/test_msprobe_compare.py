"""Two runs' dumps compared: the layer whose weight was perturbed is named first, by msprobe's own
compare and by the plain statistics comparison; two identical runs differ nowhere."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("msprobe")

import torch  # noqa: E402

from msprobe_workload import shared_config, tiny_model  # noqa: E402
from rlprof_msprobe.compare import compare_runs, layer_of, main  # noqa: E402
from test_msprobe_dumps import G, train  # noqa: E402


def models(perturbed: str | None = None):
    """A deeper model than the contract's: the perturbed layer sits between unchanged ones."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 2))
    if perturbed is not None:
        with torch.no_grad():
            model.get_submodule(perturbed).weight.mul_(1.001)
    return {"actor": model, "ref": tiny_model()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    overrides = [f"{G}.config_path={shared_config()}", f"{G}.stages=[actor_update]"]
    for name, perturbed in (("reference", None), ("same", None), ("perturbed", "2")):
        train(root / name, overrides, steps=1, models=models(perturbed))
    return root


@pytest.mark.parametrize("method", ["msprobe", "statistics"])
def test_the_perturbed_layer_is_named_first(runs, method):
    [(key, result)] = compare_runs(runs / "perturbed", runs / "reference", tolerance=1e-6, method=method).items()
    assert key == (1, "actor_update", 0) and result.method == method
    assert result.layers[0].layer == "Module.2.Linear"
    first = {d.layer: d.first for d in result.layers}
    # the layer before it ran identically forward; only its gradients (backward, after the perturbed layer) differ.
    # Module.1, not Module.0: msprobe leaves a model's first and last modules out whenever verl is imported
    # in the process (as it is when the whole suite runs), see plugins/msprobe/README.md
    assert ".backward." in first["Module.1.Tanh"]


@pytest.mark.parametrize("method", ["msprobe", "statistics"])
def test_identical_runs_differ_nowhere(runs, method):
    [result] = compare_runs(runs / "same", runs / "reference", tolerance=1e-6, method=method).values()
    assert result.layers == [] and result.compared > 0


def test_the_command_prints_the_layers_first_divergence_first(runs, capsys):
    assert main([str(runs / "perturbed"), str(runs / "reference"), "--tolerance", "1e-6", "--method", "statistics"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("step 1 actor_update rank 0 (statistics, ")
    assert out[1].startswith("  1. Module.2.Linear  (first: Module.2.Linear.forward.0.")
    assert main([str(runs / "same"), str(runs / "reference"), "--method", "statistics"]) == 0
    assert main([str(runs / "same"), str(runs / "reference"), "--step", "7"]) == 2


def test_layer_names():
    assert layer_of("Module.rnn.GRU.forward.0.output.0") == "Module.rnn.GRU"
    assert layer_of("Module.2.Linear.parameters_grad.weight") == "Module.2.Linear"
    assert layer_of("Functional.linear.3.backward.input.0") == "Functional.linear.3"


# --------------------------------------------------------------------------- through the rlprof command line


def rlprof(capsys, *args):
    """``rlprof ARGS`` in this process (the function the ``rlprof`` script calls): (status, stdout, stderr)."""
    from rlprof.cli import main as rlprof_main

    capsys.readouterr()
    code = rlprof_main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_rlprof_msprobe_compare_names_the_perturbed_layer_first(runs, capsys):
    code, out, _ = rlprof(capsys, "msprobe-compare", runs / "perturbed", runs / "reference", "--tolerance", "1e-6")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("step 1 actor_update rank 0 (msprobe, ")
    assert lines[1].startswith("  1. Module.2.Linear  (first: Module.2.Linear.forward.0.")
    code, out, _ = rlprof(capsys, "msprobe-compare", runs / "same", runs / "reference", "--tolerance", "1e-6")
    assert code == 0 and "no layer differs beyond 1e-06" in out


def test_rlprof_help_shows_the_command_in_one_line(capsys):
    code, out, _ = rlprof(capsys, "--help")
    assert code == 0 and "compare two runs' msprobe dumps: the layers that differ" in " ".join(out.split())
    assert "  rlprof msprobe-compare RUN_A RUN_B [--tolerance T]" in out


def test_rlprof_report_lists_each_dump_with_its_tensors_and_size(runs, capsys):
    code, out, _ = rlprof(capsys, "report", runs / "reference")
    assert code == 0, out
    dumps = [l for l in out.splitlines() if "precision_debugger/actor_update" in l]
    assert len(dumps) == 1, out
    details = [l.strip() for l in out.splitlines() if "tensors dumped" in l]
    assert len(details) == 1 and re.search(r"^step\d+/(rank|proc)\d+: \d+ tensors dumped, [\d.]+ [KM]?B of tensor data, \d+ calls",
                                           details[0]), out
