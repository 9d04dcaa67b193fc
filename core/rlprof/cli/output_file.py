"""The one rule for a file an rlprof command writes where the user works (``report --html``, ``timeline``, a
plugin's command): it never replaces a file the user did not name as replaceable.

* ``-o FILE`` naming a file that does not exist: it is written.
* ``-o FILE`` naming one that exists: nothing is written and the command exits 2, naming the path and how to
  say yes (``--force``) or choose another name. ``--force`` replaces it (never a directory).
* no ``-o``: the command names the file itself (``report.html``, ``timeline.json`` in the working directory)
  and, when that name is taken, writes the first free numbered name beside it (``timeline.1.json``,
  :func:`rlprof.layout.numbered`) and says so. So a "next:" command pasted twice writes two files and
  replaces neither.

Whatever the case, the content goes to a temporary file beside the target and appears under its name only
whole, at the end: by a hard link, which fails if the name was taken meanwhile (never a rename over it),
or, with ``--force``, by a rename. An interrupted command leaves no half file and no temporary file.

Use::

    add_arguments(parser, default="timeline.json", what="the trace")      # -o FILE, --force
    try:
        target = choose(opts.output, default="timeline.json", force=opts.force)
    except OutputRefused as refused:
        print(f"rlprof timeline: {refused}", file=sys.stderr); return EXIT_INVALID
    ...
    with target.writing() as handle:
        handle.write(...)
    print(f"rlprof timeline: wrote {target.said()}")
"""

from __future__ import annotations

import argparse
import errno
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from rlprof.layout import MAX_NUMBER, numbered

FORCE = "--force"


class OutputRefused(Exception):
    """The file cannot be written as asked (it exists and ``--force`` was not given, or it is a directory):
    the message names the path and what to do. Commands exit 2 (usage) with it."""


def add_arguments(parser: argparse.ArgumentParser, *, default: str, what: str, required: bool = False) -> None:
    """``-o/--output FILE`` and ``--force``, with help saying the rule."""
    where = "" if required else f" (default: {default} in the working directory, or {numbered(default, 1)}, ... when taken)"
    parser.add_argument("-o", "--output", default=None, required=required, metavar="FILE",
                        help=f"{what}{where}; an existing FILE is never replaced unless {FORCE} is given")
    parser.add_argument(FORCE, action="store_true", help="replace the file named with -o if it exists")


class Target:
    """Where a command's file goes: the path named with ``-o`` (``named``), or the command's own name
    (:func:`choose`). After :meth:`writing`, :attr:`path` is where the file is."""

    def __init__(self, path: Path, *, named: bool, force: bool, default: Path | None = None):
        self.path = path
        self.named = named
        self.force = force
        self.default = default
        """The command's own name, when ``path`` is a numbered one chosen because it was taken."""

    def said(self) -> str:
        """``report.1.html (report.html exists and is kept)``: where it went, and why there."""
        if self.default is not None and self.path != self.default:
            return f"{self.path} ({self.default} exists and is kept; -o FILE names another)"
        return str(self.path)

    @contextmanager
    def writing(self) -> Iterator[IO[str]]:
        """A text handle whose content appears at :attr:`path` when the block ends without an exception
        (see the module docstring). :raises OutputRefused: the name was taken meanwhile (a named one
        without ``--force``)."""
        directory = self.path.parent
        temporary = directory / f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        handle = open(temporary, "x", encoding="utf-8")
        try:
            with handle:
                yield handle
            self._put(temporary)
        finally:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass

    def _put(self, temporary: Path) -> None:
        if self.force:
            os.replace(temporary, self.path)
            return
        for n in range(MAX_NUMBER + 1):
            candidate = numbered(self.default, n) if self.default is not None else self.path
            if _link(temporary, candidate):
                self.path = candidate
                return
            if self.default is None:
                raise OutputRefused(_exists(self.path))
        raise OutputRefused(f"{self.default} and its numbered names up to .{MAX_NUMBER} all exist; name a file with -o")


def choose(output: str | os.PathLike | None, *, default: str, force: bool = False) -> Target:
    """The target of a command that writes one file: ``output`` (``-o``) or ``default`` (see the module
    docstring). :raises OutputRefused: ``output`` exists and ``force`` is false, or it is a directory."""
    if output is not None:
        path = Path(output)
        if path.is_dir():
            raise OutputRefused(f"{path} is a directory; name a file with -o")
        if os.path.lexists(path) and not force:
            raise OutputRefused(_exists(path))
        return Target(path, named=True, force=force)
    path = Path(default)
    for n in range(MAX_NUMBER + 1):
        if not os.path.lexists(numbered(path, n)):
            return Target(numbered(path, n), named=False, force=False, default=path)
    raise OutputRefused(f"{path} and its numbered names up to .{MAX_NUMBER} all exist; name a file with -o")


def _exists(path: Path) -> str:
    return (f"{path} exists; nothing was written (it is never replaced unless you say so). "
            f"Add {FORCE} to replace it, or name another file with -o")


def _link(source: Path, target: Path) -> bool:
    """Put ``source`` at ``target`` unless something is there: True when done, False when the name is taken."""
    try:
        os.link(source, target)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV):
            raise
    try:  # a file system without hard links: claim the name, then copy
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return False
    with open(fd, "wb") as out, open(source, "rb") as data:
        shutil.copyfileobj(data, out, 1 << 20)
    return True
