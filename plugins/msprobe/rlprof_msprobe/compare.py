"""Two runs' msprobe dumps side by side: which layers differ beyond a tolerance, first divergence first.

The question a precision hunt asks: the same training, two runs (another card, another build, a
perturbed checkpoint), and ``training/rollout_probs_diff_mean`` drifts: where does it start? Each
dumped region of one run (step, region, rank) is paired with the same one of the other run; within a
pair, every tensor msprobe described (inputs, outputs, parameters, gradients of each layer call) is
compared, and the layers whose tensors differ beyond the tolerance are listed in the order their
first differing call ran: the first one listed is where the runs part.

Two ways to compare, each named in the result:

* ``msprobe``: msprobe's own compare (``msprobe.pytorch.compare.pt_compare``), which runs on CPU on
  the two ``dump.json`` files and writes its CSV; its relative errors (max, min, mean and L2 norm of each
  tensor) are read back.
* ``statistics``: a plain comparison of the same statistics read from ``dump.json`` here, without
  msprobe: relative difference ``|a - b| / max(|a|, |b|)`` of each. Used when msprobe's compare cannot
  run (not installed, or it failed: the result says why).

A layer is the call's name without its direction and count: ``Module.rnn.GRU.forward.0`` and
``Module.rnn.GRU.backward.0`` are the layer ``Module.rnn.GRU`` (msprobe's level L0); at level L1 each
API call is its own "layer" (``Functional.linear.3``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .dumps import dump_files, read_dump

DEFAULT_TOLERANCE = 1e-3
"""Relative difference above which a tensor differs (0.1 %); identical computations differ by exactly 0."""
STATISTICS = ("Max", "Min", "Mean", "Norm")
MSPROBE_COLUMNS = ("MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr")
"""The columns of msprobe's compare CSV (summary mode) read back."""
_LAYER = re.compile(r"^(?P<layer>.+?)\.(?:forward|backward|parameters_grad)(?:\.\d+)?(?:\..*)?$")


@dataclass(frozen=True)
class LayerDiff:
    layer: str
    first: str
    """The first tensor of the layer that differs (call and slot), e.g. ``Module.rnn.GRU.forward.0.output.0``."""
    order: int
    """Where that tensor came in the run (its row in call order): layers are listed by it."""
    worst: float
    """The largest relative difference of the layer's tensors (``inf``: present in one run only)."""


@dataclass
class Comparison:
    """The layers of one pair of dumps that differ beyond ``tolerance``, first divergence first."""

    method: str
    """``msprobe`` or ``statistics``, with why msprobe's compare was not used when it was not."""
    tolerance: float
    compared: int
    """How many tensors were compared."""
    layers: list[LayerDiff] = field(default_factory=list)


def layer_of(name: str) -> str:
    """``Module.rnn.GRU.forward.0.output.0`` -> ``Module.rnn.GRU``; a name of another shape is its own layer."""
    found = _LAYER.match(name)
    return found.group("layer") if found else name


def compare_dumps(a: Path, b: Path, tolerance: float = DEFAULT_TOLERANCE, method: str = "auto") -> Comparison:
    """Compare two ``dump.json`` files (``a`` the run under suspicion, ``b`` the reference).

    ``method``: ``msprobe``, ``statistics``, or ``auto`` (msprobe's compare, else the statistics one)."""
    if method not in ("auto", "msprobe", "statistics"):
        raise ValueError(f"method: got {method!r}; allowed: auto, msprobe, statistics")
    if method == "statistics":
        return _by_statistics(a, b, tolerance, "statistics")
    try:
        rows = _msprobe_rows(a, b)
    except Exception as exc:
        if method == "msprobe":
            raise
        return _by_statistics(a, b, tolerance, f"statistics (msprobe's compare did not run: {type(exc).__name__}: {exc})")
    return _differing("msprobe", tolerance, rows)


def _by_statistics(a: Path, b: Path, tolerance: float, method: str) -> Comparison:
    """The plain statistics comparison: each tensor's Max/Min/Mean/Norm, paired by call and slot."""
    theirs = {(t.call, t.slot): t.stats for t in read_dump(b).tensors()}
    rows = []
    for t in read_dump(a).tensors():
        other = theirs.get((t.call, t.slot))
        rows.append((f"{t.call}.{t.slot}", math.inf if other is None else
                     max((_relative(t.stats.get(s), other.get(s)) for s in STATISTICS), default=0.0)))
    return _differing(method, tolerance, rows)


def _msprobe_rows(a: Path, b: Path) -> list[tuple[str, float]]:
    """msprobe's compare of the two files, as ``(tensor name, largest relative error)`` in its row order."""
    from msprobe.pytorch.compare.pt_compare import pt_compare

    with tempfile.TemporaryDirectory(prefix="rlprof-msprobe-compare-") as out:
        with contextlib.redirect_stdout(sys.stderr):  # msprobe prints its log lines: stdout is the comparison's
            pt_compare({"npu_path": str(a), "bench_path": str(b), "is_print_compare_log": False}, out)
        [result] = sorted(Path(out).glob("compare_result_*.csv"))
        with open(result, newline="", encoding="utf-8") as f:
            return [(row["NPU Name"], max((_percent(row.get(c)) for c in MSPROBE_COLUMNS), default=0.0))
                    for row in csv.DictReader(f)]


def _differing(method: str, tolerance: float, rows: Sequence[tuple[str, float]]) -> Comparison:
    result = Comparison(method, tolerance, len(rows))
    by_layer: dict[str, LayerDiff] = {}
    for order, (name, diff) in enumerate(rows):
        if not diff > tolerance:
            continue
        layer = layer_of(name)
        seen = by_layer.get(layer)
        by_layer[layer] = LayerDiff(layer, name, order, diff) if seen is None else \
            LayerDiff(layer, seen.first, seen.order, max(seen.worst, diff))
    result.layers = sorted(by_layer.values(), key=lambda d: d.order)
    return result


def _relative(a: object, b: object) -> float:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return 0.0 if a == b else math.inf
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


def _percent(text: str | None) -> float:
    """msprobe's ``"7.2%"`` -> 0.072; ``N/A``, empty or anything else unreadable -> 0 (nothing to say)."""
    try:
        return float(str(text).strip().rstrip("%")) / 100
    except ValueError:
        return 0.0


# --------------------------------------------------------------------------- runs and the command


def run_dumps(path: Path | str) -> dict[tuple[int, str, int], Path]:
    """The dumps a run (or every run under a save_path) listed in its manifest: ``(step, region, rank) -> directory``."""
    from rlprof.backend_api import read_records

    found = {}
    for r in read_records([Path(path)]):
        if r.get("type") == "artifact" and r.get("kind") == "msprobe_dump":
            found[(r.get("step"), r.get("region"), r.get("rank"))] = Path(r["_run_dir"]) / r["path"]
    return found


def compare_runs(a: Path | str, b: Path | str, tolerance: float = DEFAULT_TOLERANCE, method: str = "auto", *,
                 step: int | None = None, region: str | None = None,
                 rank: int | None = None) -> dict[tuple[int, str, int], Comparison]:
    """Every dump of run ``a`` paired with the same (step, region, rank) of run ``b`` (narrowed to
    ``step``/``region``/``rank`` when given), compared; in step, region, rank order."""
    mine, theirs = run_dumps(a), run_dumps(b)
    wanted = (step, region, rank)
    out = {}
    for key in sorted(mine.keys() & theirs.keys()):
        if any(w is not None and w != k for w, k in zip(wanted, key)):
            continue
        pairs = list(zip(dump_files(mine[key]), dump_files(theirs[key])))
        if pairs:
            out[key] = compare_dumps(*pairs[0], tolerance=tolerance, method=method)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``rlprof msprobe-compare RUN_A RUN_B``: the layers that differ, per dumped step, region and rank.
    Exit status: 0 no layer differs beyond the tolerance; 1 some do; 2 nothing to compare."""
    p = argparse.ArgumentParser(prog="rlprof msprobe-compare", description=__doc__.split("\n\n")[0])
    p.add_argument("run_a", help="a run directory (or a save_path holding one run): the run under suspicion")
    p.add_argument("run_b", help="the reference run")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"relative difference above which a tensor differs (default {DEFAULT_TOLERANCE})")
    p.add_argument("--method", choices=("auto", "msprobe", "statistics"), default="auto",
                   help="msprobe's own compare, the plain statistics comparison, or msprobe's when it runs (default)")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--region", help="only this region, e.g. actor_update")
    p.add_argument("--rank", type=int, help="only this rank")
    opts = p.parse_args(argv)
    results = compare_runs(opts.run_a, opts.run_b, opts.tolerance, opts.method, step=opts.step, region=opts.region,
                           rank=opts.rank)
    if not results:
        print(f"rlprof msprobe-compare: no msprobe dump of one run matches one of the other "
              f"({opts.run_a}, {opts.run_b})", file=sys.stderr)
        return 2
    for (step, region, rank), result in results.items():
        head = f"step {step} {region} rank {rank} ({result.method}, {result.compared} tensors)"
        if not result.layers:
            print(f"{head}: no layer differs beyond {result.tolerance:g}")
            continue
        print(f"{head}: {len(result.layers)} layer{'s' if len(result.layers) != 1 else ''} differ beyond "
              f"{result.tolerance:g}, first divergence first:")
        for n, d in enumerate(result.layers, 1):
            print(f"  {n}. {d.layer}  (first: {d.first}; largest relative difference {d.worst:.3g})")
    return 1 if any(r.layers for r in results.values()) else 0
