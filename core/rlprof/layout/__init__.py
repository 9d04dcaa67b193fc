"""Where rlprof's files go under ``save_path``, and writing them there safely: the layout's face.

One layout for every backend; nothing is ever overwritten. Its parts:

* :mod:`~rlprof.layout.paths` — where things go (runs, captures, processes, a trace's rows);
* :mod:`~rlprof.layout.safe_io` — writing under a run without following a planted link;
* :mod:`~rlprof.layout.reserved` — names never taken twice (a file claimed before its bytes come);
* :mod:`~rlprof.layout.held_dirs` — the directories a walk keeps open between walks, per process;
* :mod:`~rlprof.layout.save_path` — whether a ``save_path`` can be used, said before anything is written.

Plugins import the names below from ``rlprof.layout`` (a name DESIGN.md keeps in place).
"""

from __future__ import annotations

from rlprof.layout.paths import (BREAKDOWN_DIR, BUDGET_DIR, MANIFEST_DIR, REQUESTS_DIR, PEAK_DIR, LATE_DIR, MAX_NAME, safe_name, new_run_id,
                                 hostname, process_tag, steps_label, CORE_DIRS, ROWS_SUFFIX, CACHE_ENV, rows_path,
                                 shipped_rows_path, capture_directory, process_of, host_of, relative)
from rlprof.layout.safe_io import (UnsafePathError, AUDIT, ensure_dir, open_file, close_quietly, tool_output, ScratchDir, place, new_file)
from rlprof.layout.reserved import (PARTIAL_SUFFIX, MAX_NUMBER, numbered, Reserved, reserve, write_reserved, place_reserved)
from rlprof.layout.held_dirs import release_held_dirs
from rlprof.layout.save_path import check_save_path
