"""Files the analysis commands write (``report --html -o``, ``timeline -o``): never someone else's.

Running ``rlprof report RUN --html -o report.html`` again should refresh the page, but a mistyped
``-o`` must never destroy a trace or any other file a user collected. So an existing output is
replaced only when it is a file the same command wrote before (its first bytes carry the command's
``marker``); anything else is refused with the reason. The new content is written to a temporary
file beside the target and moved over it at the end, so an interrupted write leaves the old file
intact and never a half-written one.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

HEAD_BYTES = 4096
"""How much of an existing file is read to find the marker."""


def refusal(path: Path, marker: bytes) -> str | None:
    """Why ``path`` must not be written (None: it is free, or a previous output of this command)."""
    if not os.path.lexists(path):
        return None
    if path.is_symlink() or not path.is_file():
        return f"{path} exists and is not a regular file"
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError as exc:
        return f"{path} exists and cannot be read ({exc.strerror})"
    if marker not in head:
        return f"{path} exists and was not written by this command; choose another file (nothing is ever replaced but a previous output)"
    return None


@contextmanager
def replacing(path: Path) -> Iterator[IO[str]]:
    """A text handle whose content becomes ``path`` when the block ends without an exception."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    handle = open(temporary, "x", encoding="utf-8")
    try:
        with handle:
            yield handle
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
