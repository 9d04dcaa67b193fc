"""The manifest: one JSON-lines file per process, merged on read; its records, and where each is built (the face).

Each line is a record with a ``type`` and the common fields ``run``, ``rank``, ``host``, ``pid``, ``time``:

* ``process``  — one per Profiler that will profile (colocated Profilers of one process each write
  one into the shared file; readers take the union of ``roles``): the fields of :class:`ProcessRecord`.
* ``artifact`` — one file or directory a backend produced: step(s), role(s), region, backend,
  capture, path (relative to the run directory), size in bytes, kind, iterations. A backend that
  writes in the background lists a file twice: ``state: "writing"`` when its capture closes, then
  ``state: "written"`` (its size, ``sha256``) or ``"failed"`` (``error``) once that is settled;
  readers take the pair as one record (:func:`settled_artifacts`), and a ``writing`` left alone names
  a file the process never finished (killed, or still writing when finalize stopped waiting).
* ``capture``  — one per capture as it closes: the fields of :class:`CaptureRecord`.
* ``step``     — one per profiled step of the process: ``step``, ``start_ns``, ``end_ns``
  (``time.time_ns()``, the host's shared wall clock), ``duration_ms``.
* ``unprofiled_steps`` — steps a profiling process ran without profiling them: the fields of :class:`UnprofiledStepsRecord`.
* ``region``   — one per region of a selected role entered during a profiled step, for the whole
  region: ``step``, ``role``, ``region``, ``parent`` (the enclosing open region, or None), ``depth``,
  ``capture`` (the first capture it was in), ``start_ns``, ``end_ns``, ``duration_ms``,
  ``iterations`` (``[first, last]`` captured when sampled), ``marked_iterations``, ``error``.
  Count only ``depth`` 0 towards a step's total (nested regions are inside their parents).
* ``error``    — something failed and was contained: ``kind`` ``hook`` (a backend raised),
  ``return`` (a hook returned something that is not a path), ``write`` (the core could not write),
  ``timeout`` (the hook watchdog), ``environment`` (``check_environment`` raised or reported a
  problem); ``backend``, ``hook``, ``error`` (the message), and details.
* ``warning``  — something the user should know that failed nothing: kind ``backend`` (a backend's
  ``ctx.warn``: ``backend``, ``hook``, ``message``, ``step``, ``capture``, ``region``) or kind
  ``colocated`` (a later Profiler of the process disagreed with its session: ``key``, ``message``, ``roles``).
* ``skip``     — a backend said a capture writes nothing, and why (``ctx.skip``): ``backend``, ``hook``,
  ``reason``, ``capture``, ``steps``, ``roles``, ``region``. Such a capture is explained, not missing.
  The core writes one per backend for each step x roles a budget left out: ``by`` ``budget``, ``budget``
  (``capture_budget_mb`` or ``run_budget_gb``), ``limit_bytes``, ``measured_bytes``, ``measured`` (what went over).
* ``cleanup``  — the core released a backend that had raised: ``backend``, ``closed`` (capture ids
  it closed for it), ``finalized`` (its finalize ran without raising).
* ``profiling_wait`` — training waited for profiling's own work outside a hook (a rollout replica's
  trace export still running when its next generate came): ``source`` (the engine), ``step``,
  ``replica_rank``, ``capture`` (the engine capture waited for), ``start_ns``, ``end_ns``, ``ms``. The
  report counts it as profiling's cost of that step.
* ``phase``    — a phase of the training driver's own step, as the driver times it: the fields of :class:`PhaseRecord`.
* ``staleness`` — how far behind the trainer's weights the samples of an asynchronous run's step were:
  the fields of :class:`StalenessRecord`.
* ``finalized``— a Profiler finalized (reason). Its absence means the process died first.
* ``worker_failure`` — written by the Ray controller (``manifest/controller-<host>-<pid>.jsonl``) for a
  worker that died, hung past the timeout or raised in an rlprof call (see :mod:`rlprof.ray`).
* ``node``     — first line of a manifest the Ray controller gathered from another node: the fields of :class:`NodeRecord`.
* ``node_lost`` — the controller found a node dead: the fields of :class:`NodeLostRecord`.
* ``gathered`` — ``global_profiler.gather: traces`` moved (or did not move) one file to the controller:
  ``node``, ``source`` (absolute path on the node), ``path`` (relative to the controller's run
  directory), ``size``, ``sha256``, ``status`` (``verified``, ``exists``, ``failed``, ``over_budget``),
  ``deleted_local``.

A record type declared as a dataclass (:class:`ProcessRecord`, :class:`CaptureRecord`, :class:`PhaseRecord`, ...;
new record types follow them) is declared once: the writer builds one and writes its fields (:func:`record_fields`), the
reader reads one back (:func:`read_record`), each field typed, defaulted and documented where it is
declared, and the report's check of a usable record (:func:`required`, ``rlprof.analysis.runs.REQUIRED``)
comes from it, so a new field is one edit, read by both sides.

Lines are appended and flushed as they happen (timing records at the end of each step), so a process
killed mid-run keeps what it recorded. Writing never raises into training: a failed write (disk
full) is logged once, counted, and recorded as an ``error`` of kind ``write`` once writing works again.

Its parts: :mod:`~rlprof.manifest.records` (the declared record types and their decoder),
:mod:`~rlprof.manifest.writer` (a process's file), :mod:`~rlprof.manifest.builders` (the records a
process builds), :mod:`~rlprof.manifest.reading` (every process's file, merged). ``rlprof.manifest`` keeps
every name plugins and the core import.
"""

from __future__ import annotations

from rlprof.manifest.records import (FAILURE_RECORD, GATHERED_RECORD, short_node, ProcessRecord, CaptureRecord,
                                     StalenessRecord, STALENESS_RECORD, FrameworkIdleRecord, FRAMEWORK_IDLE_RECORD,
                                     PhaseRecord, PHASE_RECORD, UnprofiledStepsRecord, NodeRecord, NODE_RECORD,
                                     NodeLostRecord, NODE_LOST_RECORD, record_fields, read_record, required)
from rlprof.manifest.writer import (path_size, ManifestWriter, record_relocation)
from rlprof.manifest.reading import (WRITING, WRITTEN, settled_artifacts, manifest_files, read_records, artifacts)
from rlprof.manifest.builders import (describe_error, step_record, phase_record, plain_steps_record, region_record,
                                      wait_record, error_record, artifact_record, note_records, process_record,
                                      cleanup_fields)
