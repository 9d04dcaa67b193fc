"""The NVTX ranges of an nsys report, summarised: what ``rlprof report`` prints under each report.

The backend's ``report_details`` hook (:func:`nvtx_details`). The report
is exported with ``nsys export --type sqlite`` into a temporary directory (never beside the user's
file: ``nsys stats`` would leave a ``.sqlite`` there), then read with Python's sqlite3: per range
name, how many instances and their total and mean duration. Without ``nsys`` on PATH, or for a
report it cannot read, one line says why; nothing here raises.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

EXPORT_TIMEOUT_S = 120.0
_RANGES = (59, 60)  # NVTX_EVENTS.eventType: push/pop and start/end ranges
_DOMAIN_CREATE = 75


@dataclass(frozen=True)
class RangeSummary:
    """All instances of one NVTX range name in one domain."""

    domain: str
    name: str
    count: int
    total_ns: int

    @property
    def label(self) -> str:
        return f"{self.domain}:{self.name}" if self.domain else self.name


def nvtx_ranges(report: Path, nsys: str | None = None) -> list[RangeSummary]:
    """The NVTX ranges recorded in ``report`` (a ``.nsys-rep``), longest total first.

    :raises RuntimeError: nsys is missing or cannot export the report (message says which).
    """
    with tempfile.TemporaryDirectory(prefix="rlprof-nsys-") as tmp:
        database = Path(tmp) / "report.sqlite"
        export_sqlite(report, database, nsys)
        return ranges_in_database(database)


def export_sqlite(report: Path, database: Path, nsys: str | None = None) -> None:
    """``nsys export --type sqlite`` of ``report`` into ``database`` (written under exactly that name).

    :raises RuntimeError: nsys is missing or cannot export the report (message says which).
    """
    nsys = nsys or shutil.which("nsys")
    if nsys is None:
        raise RuntimeError("nsys is not on PATH")
    proc = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(database), str(report)],
                          capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
    if proc.returncode != 0 or not database.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise RuntimeError(f"nsys export failed: {tail[0]}")


def ranges_in_database(database: Path) -> list[RangeSummary]:
    """The NVTX ranges of an exported report (``nsys export --type sqlite``)."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "NVTX_EVENTS" not in tables:
            return []
        strings = "StringIds" in tables
        text = "COALESCE(e.text, s.value)" if strings else "e.text"
        join = "LEFT JOIN StringIds s ON e.textId = s.id" if strings else ""
        domains = {row[0]: row[1] for row in connection.execute(
            f"SELECT e.domainId, {text} FROM NVTX_EVENTS e {join} WHERE e.eventType = ?", (_DOMAIN_CREATE,))}
        rows = connection.execute(
            f"SELECT e.domainId, {text}, COUNT(*), SUM(e.end - e.start) FROM NVTX_EVENTS e {join} "
            f"WHERE e.eventType IN ({','.join('?' * len(_RANGES))}) AND e.end IS NOT NULL "
            f"GROUP BY e.domainId, {text}", _RANGES).fetchall()
    finally:
        connection.close()
    summaries = [RangeSummary(domains.get(domain) or "", name or "", count, int(total or 0)) for domain, name, count, total in rows]
    return sorted(summaries, key=lambda r: (-r.total_ns, r.label))


def nvtx_details(path: Path) -> list[str]:
    """``rlprof report``'s lines for one nsys report: its NVTX ranges (count, total, mean), or why not."""
    path = Path(path)
    if not path.name.endswith(".nsys-rep"):
        return []
    try:
        ranges = nvtx_ranges(path)
    except (RuntimeError, OSError, subprocess.SubprocessError, sqlite3.Error) as exc:
        return [f"NVTX summary unavailable: {exc}"]
    if not ranges:
        return ["NVTX: no ranges in this report"]
    width = max(len(r.label) for r in ranges)
    return [f"NVTX {r.label:<{width}}  {r.count:>4} x  total {r.total_ns / 1e6:9.3f} ms  mean {r.total_ns / r.count / 1e6:9.3f} ms"
            for r in ranges]
