"""Fuzz the configuration paths with thousands of generated configs and print the counts.

    .venv/bin/python scripts/fuzz_config.py --examples 3000 [--seed 1] [--timeout 30]

Each case (see ``tests/config/fuzz_configs.py``) runs in a forked child through the loader,
``rlprof check``'s code path and ``Profiler()``: a child that does not answer within ``--timeout``
seconds is a hang (killed), one that dies by a signal is a crash. Printed: cases by worst outcome
(tracebacks, hangs, crashes, rejections with/without a key path, accepted), per stage, the slowest
stage times, and the first distinct tracebacks. Exit 1 when any traceback, hang or crash was seen.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "config"))

WORST = ["crash", "hang", "traceback", "rejected-unnamed", "rejected", "ok"]


def verl_config() -> dict | None:
    import yaml

    from rlprof.testing.downloads import cache_dir

    wheels = sorted(cache_dir().glob("verl-0.9.1-*.whl"))
    if not wheels:
        import subprocess

        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "verl==0.9.1", "-d", str(cache_dir())],
                       capture_output=True)
        wheels = sorted(cache_dir().glob("verl-0.9.1-*.whl"))
    if not wheels:
        try:  # the verl 0.9.1 installed in the venv ships the same file
            import importlib.metadata
            import importlib.util

            spec = importlib.util.find_spec("verl")
            installed = Path(spec.origin).parent / "trainer/config/_generated_ppo_trainer.yaml" if spec and spec.origin else None
            if installed is not None and installed.is_file() and importlib.metadata.version("verl") == "0.9.1":
                return yaml.safe_load(installed.read_text())
        except (ImportError, OSError, ValueError, importlib.metadata.PackageNotFoundError):
            pass
        print("note: verl 0.9.1's wheel is not available: fuzzing the seed examples only", file=sys.stderr)
        return None
    with zipfile.ZipFile(wheels[-1]) as zf:
        return yaml.safe_load(zf.read("verl/trainer/config/_generated_ppo_trainer.yaml"))


def preload() -> None:
    """Import what every case needs once, before forking (children inherit it): the cost measured
    per case is then the configuration's, not the import of torch."""
    import omegaconf  # noqa: F401
    import yaml  # noqa: F401

    import rlprof.runtime.checking  # noqa: F401
    import rlprof.runtime.profiler  # noqa: F401
    import rlprof.config.sources  # noqa: F401
    from rlprof.installed import discover
    from rlprof.runtime.registry import load_backend

    from rlprof.runtime.checking import check_config

    for name in discover():
        try:  # loads the backend and whatever its checks import lazily (torch)
            load_backend(name)
            check_config(None, [f"global_profiler.tool={name}", "global_profiler.steps=[1]", "critic.profiler.enable=true",
                                "critic.profiler.all_ranks=true", f"global_profiler.save_path={tempfile.gettempdir()}/rlprof-fuzz-warmup"])
        except Exception:
            pass


def run_forked(case, workdir: Path, timeout: float) -> dict:
    """Run one case in a forked child; returns its per-stage outcome, or {"worst": "hang"|"crash"}."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        code = 0
        try:
            from fuzz_configs import run_case

            result = run_case(case, workdir)
            os.write(write_fd, json.dumps(result).encode())
        except BaseException:  # run_case never raises; belt and braces for the counts
            code = 3
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks, deadline = [], time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([read_fd], [], [], max(left, 0))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            return {"worst": "hang"}
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) or not chunks:
        return {"worst": "crash", "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}
    return json.loads(b"".join(chunks))


def classify(outcome: str) -> str:
    if outcome.startswith("traceback"):
        return "traceback"
    if outcome.startswith("rejected-unnamed"):
        return "rejected-unnamed"
    return outcome


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a case counts as a hang")
    opts = parser.parse_args(argv)

    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st

    from fuzz_configs import bases, cases, non_string_key_depths

    base_docs = bases(verl_config())
    preload()
    scratch = Path(tempfile.mkdtemp(prefix="rlprof-fuzz-"))
    worst = collections.Counter()
    per_stage = {stage: collections.Counter() for stage in ("load", "check", "profiler")}
    slowest = {stage: 0.0 for stage in per_stage}
    slowest_case = {stage: "" for stage in per_stage}
    samples: dict[str, str] = {}
    by_base = collections.Counter()
    by_input = collections.Counter()
    key_depths = collections.Counter()  # depth of a key that is not a string -> cases (0: in an override's value)
    key_cases = collections.Counter()  # worst outcome of the cases holding one
    started = time.perf_counter()

    @seed(opts.seed)
    @settings(max_examples=opts.examples, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def fuzz(data):
        case = data.draw(cases(base_docs))
        by_base[case.base.split(" ")[0]] += 1
        depths = non_string_key_depths(case)
        key_depths.update(depths)
        workdir = Path(tempfile.mkdtemp(dir=scratch))
        result = run_forked(case, workdir, opts.timeout)
        shutil.rmtree(workdir, ignore_errors=True)
        label = f"{case.base}; mutations {case.mutations}; form {case.form}; overrides {case.overrides}"
        if "worst" in result:
            worst[result["worst"]] += 1
            key_cases[result["worst"]] += bool(depths)
            samples.setdefault(result["worst"], label)
            return
        by_input[result.get("input", "?")] += 1
        outcomes = {stage: classify(result[stage]) for stage in per_stage}
        for stage, outcome in outcomes.items():
            per_stage[stage][outcome] += 1
            if float(result[stage + "_s"]) > slowest[stage]:
                slowest[stage], slowest_case[stage] = float(result[stage + "_s"]), label
            if outcome in ("traceback", "rejected-unnamed"):
                key = result[stage].strip().splitlines()[-1][:160]
                samples.setdefault(f"{stage} {outcome}: {key}", f"{label}\n{result[stage][-1200:]}")
        worst[min(outcomes.values(), key=WORST.index)] += 1
        key_cases[min(outcomes.values(), key=WORST.index)] += bool(depths)

    fuzz()
    total = sum(worst.values())
    print(f"rlprof config fuzz: {total} generated configs (seed {opts.seed}, bases: {dict(by_base)}) in "
          f"{time.perf_counter() - started:.0f} s")
    print(f"handed over as: {dict(by_input.most_common())}")
    print("by worst outcome per config:")
    for name in WORST:
        print(f"  {name:<17} {worst.get(name, 0)}")
    print(f"with keys that are not strings: {sum(key_cases.values())} configs, by worst outcome {dict(+key_cases)}; "
          f"configs per depth of such a key (1: top level, 0: in an override's value): {dict(sorted(key_depths.items()))}")
    print("per stage (ok / rejected with a key path / rejected without / tracebacks), slowest:")
    for stage, counts in per_stage.items():
        print(f"  {stage:<9} {counts.get('ok', 0):>5} / {counts.get('rejected', 0):>5} / {counts.get('rejected-unnamed', 0):>3} / "
              f"{counts.get('traceback', 0):>3}   slowest {slowest[stage]:.2f} s")
    for stage, label in slowest_case.items():
        print(f"  slowest {stage}: {label[:300]}")
    for key, label in list(samples.items())[:12]:
        print(f"\n--- {key}\n{label}")
    shutil.rmtree(scratch, ignore_errors=True)
    bad = worst.get("crash", 0) + worst.get("hang", 0) + worst.get("traceback", 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
