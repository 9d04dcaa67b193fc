"""Captures within a budget: how many bytes each capture wrote, and which captures the budgets leave out.

Two limits, both ``global_profiler`` keys (:mod:`rlprof.config.sections`):

* ``capture_budget_mb``, per capture: a capture that wrote more is kept (it is already on disk), and
  its roles are *over budget*: from the next profiled step on, their captures are skipped (discrete
  mode: that role's regions; end-to-end: the process's whole step capture, which holds every role).
  A trace written in the background may still be unsized when the next profiled step begins. A budget
  the user set is held exactly: that step waits for the size (at most :data:`SIZE_WAIT_S`, recorded as
  profiling's cost), or until the bytes compressed so far (the trace's ``.partial``) are over the budget. The default budget only guards a disk against a runaway capture, so it never makes
  training wait: it decides on the sizes known as the step begins, and a trace still being written
  counts from the profiled step after (at most one capture past it).
* ``run_budget_gb``, per run and node: the bytes every process of the node wrote, added up. Once it is
  reached, no process of the node opens another capture.

The process session (:mod:`rlprof.runtime.session`) owns one :class:`CaptureBudget` and asks it at two
moments only, so the hot path (a region entered) never pays for it: when a capture closes
(:meth:`CaptureBudget.closed`: its size, the ``capture`` record) and when a profiled step begins
(:meth:`CaptureBudget.refused`: which roles it leaves out, and why, for the ``skip`` records; a stat of
each file still listed ``writing`` without a size, and a bounded wait for those of closed captures, see
:data:`SIZE_WAIT_S`). Artifact records count as they are written
(:meth:`CaptureBudget.add_artifact`).

How the processes of one node agree, cheaply: each appends one line (``<bytes>\\n``, a single
``O_APPEND`` write, atomic on a local file system) to ``<run_dir>/budget/node-<host>.log`` when a capture
closes, and reads only the lines added since its last look when a profiled step begins. The run
directory is node-local (``save_path`` is; simulated nodes each have their own), and the host in the
name keeps nodes apart where a ``save_path`` is shared. Training never waits on more than one small
read per profiled step; a file that cannot be written or read costs a log line, never the run.

The decision is the core's, for every backend alike: a backend never sees a budget.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from rlprof.layout import BUDGET_DIR, PARTIAL_SUFFIX, open_file
from rlprof.manifest import WRITING, WRITTEN

log = logging.getLogger("rlprof")

MB = 1024 * 1024
GB = 1024 * MB
SIZE_WAIT_S = 30.0
"""How long a profiled step waits, at most, for the size of a closed capture's file still being written in
the background, where a ``capture_budget_mb`` the user set may turn on it (never for the default budget).
Such a file is normally in place long before the next profiled step; back-to-back profiled steps may
wait (a ``profiling_wait`` record), and stop waiting as soon as the bytes compressed so far are over the budget.
Not a tight bound: 2 s was one until a loaded CI machine took longer to write a rollout replica's 9.8 MiB trace
of verl's step 1 (FLOPs counted: every op's shapes recorded) than step 2 took to begin, and captured step 2
past a 1 MiB budget (test_verl_trainer.py's budget run: its steps [1, 2], 3 files, 22.3 MiB)."""


@dataclass(frozen=True)
class Refusal:
    """Why the budget leaves a capture out: the budget key, its limit and what was measured."""

    budget: str
    """``capture_budget_mb`` or ``run_budget_gb``."""
    limit_bytes: int
    measured_bytes: int
    measured: str
    """What was measured: the capture that went over, or ``this node's run``."""

    def reason(self) -> str:
        return (f"over global_profiler.{self.budget} (limit {_size(self.limit_bytes)}; {self.measured} wrote "
                f"{_size(self.measured_bytes)})")

    def fields(self) -> dict[str, object]:
        """What a ``skip`` record carries besides where it belongs."""
        return {"by": "budget", "budget": self.budget, "limit_bytes": self.limit_bytes,
                "measured_bytes": self.measured_bytes, "measured": self.measured, "reason": self.reason()}


class CaptureBudget:
    """One process's view of both budgets (see the module docstring).

    :param capture_mb: ``global_profiler.capture_budget_mb`` (0: no limit).
    :param run_gb: ``global_profiler.run_budget_gb`` (0: no limit).
    :param run_dir: the run's directory on this node.
    :param host: this node's host name (names the node's count file).
    :param exact: the user set ``capture_budget_mb`` (whatever its value, the default's included), so a
        profiled step waits for the sizes it turns on; the default budget never makes a step wait.
    """

    def __init__(self, capture_mb: float, run_gb: float, run_dir: Path, host: str, *, exact: bool = False):
        self.capture_limit = int(capture_mb * MB)
        self.exact = bool(capture_mb) and exact
        """A budget the user set: a profiled step waits for the sizes it turns on (the default never waits)."""
        self.run_limit = int(run_gb * GB)
        self._run_dir = run_dir
        self.node_file = run_dir / BUDGET_DIR / f"node-{host}.log"
        self.over: dict[str, Refusal] = {}
        """Role -> why its captures are skipped from now on (its capture went over ``capture_budget_mb``)."""
        self.sizes: dict[str, int] = {}
        """Capture id -> bytes its artifacts measured so far."""
        self._closed: dict[str, tuple[str, ...]] = {}
        """Closed capture id -> the roles it held."""
        self._over_captures: set[str] = set()
        self._unsized: dict[Path, str | None] = {}
        """Files listed ``writing`` whose size is not known yet -> their capture (see :meth:`add_artifact`)."""
        self.waited = False
        """The last :meth:`refused` waited for a file still being written (:data:`SIZE_WAIT_S`)."""
        self._node_bytes = 0
        self._read_to = 0
        self._told = False
        self._node_handle = None
        """This process's append handle on :attr:`node_file`, opened at its first line."""
        self._node_reader = None
        """A read handle on :attr:`node_file`, opened at the first look that finds it."""

    def add_artifact(self, entry: Mapping[str, Any]) -> None:
        """An artifact record was written: count its bytes once. A file written in the background is listed
        twice (:func:`rlprof.manifest.settled_artifacts`): ``writing``, when its bytes are not on disk yet, then
        ``written`` with its size. It counts once its size is known: from its ``written`` record, or from the
        file itself if that is in place when a profiled step begins (:meth:`refused`), whichever comes first."""
        state = entry.get("state")
        path = self._run_dir / entry["path"] if entry.get("path") else None
        if state == WRITING and path is not None:
            self._unsized[path] = entry.get("capture")
        elif state in (WRITTEN, "failed"):
            if path in self._unsized:
                self._sized(path, int(entry.get("size") or 0) if state == WRITTEN else 0)
        else:
            self.add(entry.get("capture"), int(entry.get("size") or 0))

    def add(self, capture_id: str | None, size: int) -> None:
        """An artifact of ``capture_id`` was listed. Its bytes count towards the capture until it closes;
        one listed after (a backend that writes at finalize, a trace written in the background) or tied to
        no capture fills the node's count now, and a closed capture it puts over ``capture_budget_mb`` is over."""
        if capture_id is not None:
            self.sizes[capture_id] = self.sizes.get(capture_id, 0) + size
        if size and (capture_id is None or capture_id in self._closed):
            self._publish(size)
            if capture_id is not None:
                self._check(capture_id)

    def closed(self, capture_id: str, roles: tuple[str, ...]) -> int:
        """``capture_id`` (holding ``roles``) closed: its bytes so far, added to the node's count; roles
        it put over ``capture_budget_mb`` are skipped from now on. Artifacts sized later (a backend that
        writes at finalize or in the background) are added to the node's count, and to the capture's, as they come."""
        self._closed[capture_id] = roles
        size = self.sizes.get(capture_id, 0)
        if size:
            self._publish(size)
        self._check(capture_id)
        return size

    def _check(self, capture_id: str, size: int | None = None) -> None:
        """The closed ``capture_id`` over ``capture_budget_mb`` (said once): its roles are skipped from now on.
        ``size``: what it measured, where more than :attr:`sizes` knows (a file's bytes so far)."""
        size, roles = self.sizes.get(capture_id, 0) if size is None else size, self._closed[capture_id]
        if not self.capture_limit or size <= self.capture_limit or capture_id in self._over_captures:
            return
        self._over_captures.add(capture_id)
        refusal = Refusal("capture_budget_mb", self.capture_limit, size, f"capture {capture_id}")
        for role in roles:
            self.over.setdefault(role, refusal)
        log.warning("rlprof: %s; the next captures of %s are skipped, training goes on", refusal.reason(),
                    ", ".join(roles))

    def _sized(self, path: Path, size: int) -> None:
        """A file listed ``writing`` without its size now has one."""
        self.add(self._unsized.pop(path), size)

    def _wait_for_sizes(self) -> None:
        """Wait (at most :data:`SIZE_WAIT_S`) until the files of closed captures still being written are in
        place, so ``capture_budget_mb`` decides on every closed capture; :attr:`waited` says whether it waited."""
        deadline = time.monotonic() + SIZE_WAIT_S
        while self._waiting() and time.monotonic() < deadline:
            self.waited = True
            time.sleep(0.002)
            self._size_written()

    def _waiting(self) -> bool:
        """Some closed capture not known to be over the budget has a file still being written."""
        return any(capture in self._closed and capture not in self._over_captures for capture in self._unsized.values())

    def _size_written(self) -> None:
        """The files listed ``writing`` without a size that are in place by now (a stat each); for a budget the user
        set, a closed capture whose file being written already holds more than the budget (its ``.partial``) is over."""
        for path in list(self._unsized):
            try:
                size = path.stat().st_size
            except OSError:  # still being written
                capture = self._unsized[path]
                if self.exact and capture in self._closed and capture not in self._over_captures:
                    try:
                        so_far = path.with_name(path.name + PARTIAL_SUFFIX).stat().st_size
                    except OSError:
                        continue
                    self._check(capture, self.sizes.get(capture, 0) + so_far)
                continue
            self._sized(path, size)

    def refused(self, roles: tuple[str, ...]) -> dict[str, Refusal]:
        """Of ``roles`` (those a profiled step would profile here), the ones the budgets leave out, and why."""
        self.waited = False
        if self._unsized:
            self._size_written()
            if self.exact:
                self._wait_for_sizes()
        if self.run_limit:
            node = self._node_total()
            if node >= self.run_limit:
                refusal = Refusal("run_budget_gb", self.run_limit, node, "this node's run")
                return dict.fromkeys(roles, refusal)
        return {role: self.over[role] for role in roles if role in self.over}

    # ------------------------------------------------------------------ the node's count

    def _publish(self, size: int) -> None:
        if not self.run_limit:
            return
        try:
            # one short line, one append (O_APPEND: other processes' lines never interleave inside it), through
            # a handle opened once by the layout's link-refusing walk (a link planted at budget/ never
            # redirects it; walking and opening again at every capture cost a mkdir and an open each time)
            if self._node_handle is None:
                self._node_handle = open_file(self.node_file, self._run_dir, "ab")
            self._node_handle.write(f"{size}\n".encode())
            self._node_handle.flush()
        except (OSError, ValueError) as exc:  # ValueError: the handle was closed
            self._tell(exc)
            self.close()  # opened again at the next line
            self._node_bytes += size  # this process's own bytes still count

    def close(self) -> None:
        """Close the node file's handles (the session's end); a later capture opens them again."""
        handles = (self._node_handle, self._node_reader)
        self._node_handle = self._node_reader = None
        for handle in handles:
            if handle is not None:
                try:
                    handle.close()
                except OSError:
                    pass

    def _node_total(self) -> int:
        """Bytes every process of this node wrote in this run: the lines added since the last look."""
        try:
            if self._node_reader is None:
                self._node_reader = open(self.node_file, "rb")  # kept: one read per profiled step after this
            self._node_reader.seek(self._read_to)
            new = self._node_reader.read()
        except FileNotFoundError:
            return self._node_bytes
        except (OSError, ValueError) as exc:
            self._tell(exc)
            self.close()
            return self._node_bytes
        complete = new[:new.rfind(b"\n") + 1]  # a line another process is writing right now counts next time
        self._read_to += len(complete)
        self._node_bytes += sum(int(line) for line in complete.split() if line.isdigit())
        return self._node_bytes

    def _tell(self, exc: OSError) -> None:
        if not self._told:
            self._told = True
            log.warning("rlprof: cannot keep the node's run budget count in %s (%s); this process counts its own "
                        "bytes only", self.node_file, exc)


def _size(n: int) -> str:
    return f"{n / GB:.2f} GiB" if n >= GB else f"{n / MB:.1f} MiB" if n >= MB else f"{n} bytes"
