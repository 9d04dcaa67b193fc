"""Trace files read as streams, with a bound on what one token may hold.

Readers parse JSON traces with ijson, one event at a time, so memory follows the events kept, not the
file. One thing defeats that: ijson holds a whole token (a string, a number) in memory before handing
it over, and re-scans it as it grows. A 300 MB file that opens a string and never closes it took
6.5 minutes and 320 MB to be refused (seen); a 2 GB one would take 2 GB. No trace has such a token:
Kineto's longest are kernel names and stacks (kilobytes). So every trace reader reads through
:class:`BoundedTokens`, which refuses a file as soon as :data:`LONGEST_TOKEN` bytes pass without one
of JSON's structural characters, having held at most one read's worth of it.
"""

from __future__ import annotations

from typing import IO

LONGEST_TOKEN = 16 << 20
"""More bytes than this without ``{ } [ ] , :`` is no trace (a reader stops there)."""
_STRUCTURAL = tuple(b"{}[],:"[i:i + 1] for i in range(6))


class TokenTooLong(ValueError):
    """The file runs on for :data:`LONGEST_TOKEN` bytes without any JSON structure."""


class BoundedTokens:
    """A binary file object (``read`` only, as ijson needs) that raises :class:`TokenTooLong` once the
    bytes since the last structural character exceed ``limit``. On a real trace the check finds a
    structural byte within the last few bytes of each read (``rfind`` from the end), so it costs
    next to nothing."""

    def __init__(self, handle: IO[bytes], limit: int | None = None):
        self._handle = handle
        self.limit = LONGEST_TOKEN if limit is None else limit
        self._run = 0
        """Bytes read since the last structural character."""
        self._offset = 0

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self._offset += len(data)
        last = max(data.rfind(byte) for byte in _STRUCTURAL)
        self._run = self._run + len(data) if last < 0 else len(data) - 1 - last
        if self._run > self.limit:
            raise TokenTooLong(f"no JSON structure in the {self._run / 2**20:.0f} MB before byte {self._offset}: "
                               "not a trace (read no further)")
        return data
