"""A capture asked of a running job (``rlprof capture``, issue 42): the files a request travels in, and the asking side.

The asker leaves ``<run>/requests/<id>.json``; the run's driver (:class:`rlprof.runtime.unplanned.Decider`)
reads it at its next step start and writes ``<id>.answer.json``. A driver listening for requests says so
in ``<run>/requests/driver.json`` (who answers: host, pid, since; ``refuse`` when its tool cannot start mid-run;
``ended`` once the run is over), which is how :func:`running_run` finds a running run under a ``save_path``.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from rlprof.layout import REQUESTS_DIR, hostname, open_file

REQUESTS = REQUESTS_DIR
"""The directory of a run (``<run>/requests``) where ``rlprof capture`` leaves requests and the driver answers."""
LISTENING = "driver.json"
"""Written there by an armed run's driver when it starts: who answers (host, pid, since); the CLI finds running
runs by it."""
ANSWER = ".answer.json"


def running_run(path: Path) -> tuple[Path | None, str]:
    """The run directory ``path`` means (itself, or the newest run under it whose driver listens and has not
    ended), or None and why not."""
    path = Path(path)
    if (path / REQUESTS / LISTENING).is_file():
        info = listening(path)
        if info.get("ended"):
            return None, f"{path}: this run has ended"
        return path, ""
    candidates = []
    if path.is_dir():
        for child in path.iterdir():
            if (child / REQUESTS / LISTENING).is_file():
                info = listening(child)
                if not info.get("ended") and _alive(info):
                    candidates.append((info.get("since", 0), child))
    if not candidates:
        return None, (f"{path}: no running armed run here (a run directory, or a save_path holding one, whose driver "
                      f"writes {REQUESTS}/{LISTENING}: a tool set, a role enabled, global_profiler.on_demand not false)")
    return max(candidates)[1], ""


def listening(run_dir: Path) -> dict:
    """What the run's driver wrote in ``driver.json`` ({} when nothing readable is there)."""
    try:
        return json.loads((run_dir / REQUESTS / LISTENING).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _alive(info: dict) -> bool:
    """The driver's process still runs (when it is on this host; elsewhere it cannot be told: assumed)."""
    if info.get("host") != hostname() or not isinstance(info.get("pid"), int):
        return True
    try:
        os.kill(info["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def request(run_dir: Path, steps: int = 1) -> str:
    """Leave a request for ``steps`` steps in ``run_dir``; its id."""
    request_id = time.strftime("r%Y%m%d-%H%M%S-") + secrets.token_hex(2)
    write_json(Path(run_dir) / REQUESTS / f"{request_id}.json", {"steps": steps, "asked": time.time()}, Path(run_dir))
    return request_id


def answer(run_dir: Path, request_id: str, wait_s: float) -> dict | None:
    """The driver's answer to ``request_id``, waiting at most ``wait_s``; None when none came."""
    path = Path(run_dir) / REQUESTS / f"{request_id}{ANSWER}"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)




def write_json(path: Path, value: Any, root: Path) -> None:
    """Write ``value`` to ``path`` whole (a reader never sees half a file): a new temporary name, then a
    rename; never through a link planted at or under the run directory ``root`` (:func:`rlprof.layout.open_file`)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    with open_file(temporary, root, "w") as handle:
        handle.write(json.dumps(value))
    os.replace(temporary, path)
