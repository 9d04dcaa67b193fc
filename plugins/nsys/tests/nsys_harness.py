"""What the nsys backend's tests share: the NVTX recorder tool, a profiled loop run in a fresh
process under it, and a reader for what the recorder saw.

The recorder (``nvtx_injection/recorder.c``) is built from NVTX's own headers, taken from the
``nvidia-nvtx-cu12`` wheel (85 kB, headers only) into a cache directory, never committed:
``$RLPROF_TEST_CACHE`` or ``~/.cache/rlprof-tests``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

HERE = Path(__file__).parent
RECORDER_SOURCE = HERE / "nvtx_injection" / "recorder.c"
SCENARIO_SCRIPT = HERE / "nsys_scenario.py"
NVTX_HEADERS_WHEEL = "nvidia-nvtx-cu12==12.9.79"
DOMAIN = "rlprof"


class Unavailable(Exception):
    """Something a test needs cannot be had on this machine (no compiler, no index): skip, saying why."""


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


from rlprof.testing.downloads import cache_dir  # noqa: E402  (one cache for every test)


def nvtx_include_dir() -> Path:
    """A directory holding ``nvtx3/nvToolsExt.h``: cached, else fetched with pip from the wheel."""
    target = cache_dir() / "nvtx-include"
    if (target / "nvtx3" / "nvToolsExt.h").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
             "--dest", tmp, NVTX_HEADERS_WHEEL],
            capture_output=True, text=True, timeout=300,
        )
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode or not wheels:
            raise Unavailable(f"cannot fetch the NVTX headers ({NVTX_HEADERS_WHEEL}): {proc.stderr.strip()[-400:]}")
        staging = Path(tmp) / "include"
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in wheel.namelist():
                marker = member.find("/include/nvtx3/")
                if marker < 0 or member.endswith("/"):
                    continue
                destination = staging / member[marker + len("/include/"):]
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.write_bytes(wheel.read(member))
        if not (staging / "nvtx3" / "nvToolsExt.h").is_file():
            raise Unavailable(f"{wheels[0].name} holds no include/nvtx3/nvToolsExt.h")
        try:
            staging.rename(target)  # atomic: a concurrent session either wins or finds it done
        except OSError:
            if not (target / "nvtx3" / "nvToolsExt.h").is_file():
                raise
    return target


def build_recorder(out_dir: Path) -> Path:
    """Compile the recorder into ``out_dir``; returns the shared library."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise Unavailable("no C compiler (gcc/cc) to build the NVTX recorder")
    library = out_dir / "librlprof_nvtx_recorder.so"
    proc = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-I", str(nvtx_include_dir()),
         "-o", str(library), str(RECORDER_SOURCE), "-lpthread"],
        capture_output=True, text=True,
    )
    if proc.returncode:
        raise AssertionError(f"the NVTX recorder does not compile:\n{proc.stderr}")
    return library


# ---------------------------------------------------------------------------------- what it saw


@dataclass
class Range:
    name: str
    depth: int
    pid: int
    tid: int
    color: int | None
    category: int | None
    children: list["Range"] = field(default_factory=list)

    def outline(self) -> Any:
        """``name`` for a leaf, ``(name, [children...])`` otherwise: easy to compare with ==."""
        return (self.name, [c.outline() for c in self.children]) if self.children else self.name


@dataclass
class Recording:
    """The NVTX events one or more processes sent to the recorder."""

    events: list[dict[str, Any]]

    @classmethod
    def read(cls, path: Path) -> "Recording":
        if not path.exists():
            return cls([])
        return cls([json.loads(line) for line in path.read_text().splitlines() if line.strip()])

    def of(self, pid: int) -> "Recording":
        return Recording([e for e in self.events if e["pid"] == pid])

    @property
    def in_domain(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("domain") == DOMAIN]

    @property
    def apis(self) -> set[str]:
        """Every NVTX entry point the process really called (as the tool saw it)."""
        return {e["api"] for e in self.events}

    def marks(self) -> list[str]:
        return [e["msg"] for e in self.in_domain if e["ev"] == "mark"]

    def marks_with_payload(self) -> list[tuple[str, Any]]:
        return [(e["msg"], e.get("payload")) for e in self.in_domain if e["ev"] == "mark"]

    def windows(self) -> list[str]:
        """Capture ids of the windows the backend opened, from its ``capture <id> start`` marks."""
        return [m.split()[1] for m in self.marks() if m.startswith("capture ") and m.endswith(" start")]

    def ranges(self) -> tuple[list[Range], list[str]]:
        """The ``rlprof`` ranges as trees (per process, in order), and every nesting problem seen:
        a range ending while one opened inside it is still open, a reported depth that does not
        match the nesting, a range never ended."""
        roots: list[Range] = []
        problems: list[str] = []
        stacks: dict[int, list[tuple[int, Range]]] = {}
        for event in self.in_domain:
            stack = stacks.setdefault(event["pid"], [])
            if event["ev"] == "start":
                node = Range(event["msg"], event["depth"], event["pid"], event["tid"], event.get("color"), event.get("category"))
                if event["depth"] != len(stack):
                    problems.append(f"{node.name}: depth {event['depth']} but {len(stack)} range(s) open around it")
                (stack[-1][1].children if stack else roots).append(node)
                stack.append((event["id"], node))
            elif event["ev"] == "end":
                if not stack or stack[-1][0] != event["id"]:
                    inner = stack[-1][1].name if stack else None
                    problems.append(f"{event['msg']} ended while {inner} was open inside it")
                    stack[:] = [s for s in stack if s[0] != event["id"]]
                else:
                    stack.pop()
            elif event["ev"] in ("push", "pop"):
                problems.append(f"unexpected push/pop range {event['msg']!r}: the backend uses start/end ranges")
        for pid, stack in stacks.items():
            problems.extend(f"{node.name} (pid {pid}) never ended" for _, node in stack)
        return roots, problems

    def outline(self) -> list[Any]:
        roots, problems = self.ranges()
        assert not problems, problems
        return [r.outline() for r in roots]


# ---------------------------------------------------------------------------------- running it


@dataclass
class Loop:
    """One profiled process: its own report (``result``) and what the recorder saw from it."""

    result: dict[str, Any]
    recording: Recording
    stderr: str


def run_loops(specs: Iterable[dict[str, Any]], workdir: Path, recorder: Path | None,
              *, env: dict[str, str] | None = None, timeout: float = 120) -> list[Loop]:
    """Run ``nsys_scenario.py`` once per spec, all at once (like the ranks of a job), each in a
    fresh process with the recorder attached; wait for all."""
    workdir.mkdir(parents=True, exist_ok=True)
    running = []
    for index, spec in enumerate(specs):
        spec_file, result_file, events = (workdir / f"proc{index}.{kind}" for kind in ("spec.json", "result.json", "events.jsonl"))
        spec_file.write_text(json.dumps(spec))
        process_env = {**os.environ, "RLPROF_STRICT": "1", **(env or {})}
        process_env.pop("NVTX_INJECTION64_PATH", None)
        if recorder is not None:
            process_env.update(NVTX_INJECTION64_PATH=str(recorder), RLPROF_NVTX_RECORD=str(events))
        proc = subprocess.Popen([sys.executable, str(SCENARIO_SCRIPT), str(spec_file), str(result_file)],
                                env=process_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=workdir)
        running.append((proc, result_file, events))
    loops = []
    for proc, result_file, events in running:
        _, stderr = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"the profiled loop failed ({proc.returncode}):\n{stderr}"
        loops.append(Loop(json.loads(result_file.read_text()), Recording.read(events), stderr))
    return loops


def verl_config(save_path: Path, *, steps: list[int], mode: str = "e2e", ranks: list[int] | None = None,
                continuous: bool = False, schedule: dict[str, int] | None = None,
                nsys: dict[str, Any] | None = None, relocate: bool = False) -> dict[str, Any]:
    """A verl-shaped configuration selecting the nsys backend for actor (and, following it, ref)."""
    actor: dict[str, Any] = {
        "enable": True,
        "all_ranks": ranks is None,
        "ranks": ranks or [],
        "tool_config": {"nsys": {"discrete": mode == "discrete"}},
    }
    if schedule:
        actor["schedule"] = schedule
    return {
        "global_profiler": {
            "tool": "nsys", "steps": steps, "save_path": str(save_path), "profile_continuous_steps": continuous,
            "relocate_results": relocate, "global_tool_config": {"nsys": dict(nsys or {})},
        },
        "actor_rollout_ref": {"actor": {"profiler": actor}},
    }
