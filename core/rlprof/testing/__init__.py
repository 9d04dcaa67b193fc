"""Testing tools for backend authors and for the core's own tests.

* :class:`RecordingBackend` — records every hook call.
* :mod:`rlprof.testing.scenario` — a scripted training loop that drives one backend through a real
  Profiler in a sandbox (:func:`run_scenario`, :class:`Scenario`, :class:`BackendRun`).
* :mod:`rlprof.testing.footprint` — what a run leaves behind outside its run directory.
* :mod:`rlprof.testing.plugin` — pytest fixtures ``rlprof_run`` and ``rlprof_recorder``
  (auto-loaded once rlprof is installed).
* :mod:`rlprof.testing.contract` — the backend contract as checks that explain what is wrong.
* :mod:`rlprof.testing.conformance` — the suite every backend must pass: :func:`check_backend`,
  :class:`BackendConformance`.

Only the recorder is imported here: ``import rlprof.testing`` stays as light as ``import rlprof``.
"""

from rlprof.testing.recorder import RecordingBackend

__all__ = ["RecordingBackend"]
