"""How this user started rlprof, so that a printed "next:" command runs when pasted into the same shell.

The README starts rlprof as ``.venv/bin/rlprof``; a hint that says bare ``rlprof`` then fails with
"command not found" unless the venv is on PATH. So every hint starts with :func:`rlprof_command`:

- started as a path (``.venv/bin/rlprof``, ``/opt/x/bin/rlprof``): that path as typed, or bare ``rlprof``
  when ``rlprof`` on PATH is that same file;
- started with ``python -m rlprof`` (or ``-m rlprof.cli``): the same interpreter and module;
- anything else (rlprof's functions called from a test or a notebook): bare ``rlprof`` when it is on PATH,
  else ``<this python> -m rlprof``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

NAME = "rlprof"


def rlprof_command(argv0: str | None = None) -> str:
    """The shell words that start rlprof the way this process was started (``sys.argv[0]`` unless given)."""
    typed = sys.argv[0] if argv0 is None else argv0
    path = Path(typed)
    if path.name == "__main__.py" and path.parent.name == NAME:  # python -m rlprof
        return f"{_python()} -m {NAME}"
    if path.name == "__main__.py" and path.parent.name == "cli" and path.parent.parent.name == NAME:  # -m rlprof.cli
        return f"{_python()} -m {NAME}.cli"
    if path.name == NAME and os.sep in typed:
        return NAME if _on_path_is(typed) else shlex.quote(typed)
    if shutil.which(NAME):
        return NAME
    return f"{_python()} -m {NAME}"


def _on_path_is(script: str) -> bool:
    """Whether bare ``rlprof`` in this shell would run ``script``."""
    found = shutil.which(NAME)
    try:
        return found is not None and os.path.samefile(found, script)
    except OSError:
        return False


def _python() -> str:
    """This interpreter as a command: bare ``python``/``python3`` when PATH gives this same one
    (not a file it links to: a venv's python links to the base interpreter, yet only it sees the venv)."""
    for name in ("python", "python3"):
        found = shutil.which(name)
        if found and os.path.abspath(found) == os.path.abspath(sys.executable):
            return name
    return shlex.quote(sys.executable)
