"""Testing tools for backend authors and for the core's own tests.

* :class:`RecordingBackend` — records every hook call.
* :mod:`rlprof.testing.plugin` — pytest fixtures (auto-loaded once rlprof is installed).
* :mod:`rlprof.testing.conformance` — the contract every backend must pass.
"""

from .recorder import RecordingBackend

__all__ = ["RecordingBackend"]
