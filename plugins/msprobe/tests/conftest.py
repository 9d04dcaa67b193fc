"""The plugin's tests import from this directory (msprobe_workload); and msprobe is imported once here.

msprobe's import (at the backend's first dump) imports matplotlib, which makes its config and cache
directories in the user's home (``~/.config/matplotlib``, ``~/.cache/matplotlib``) the first time and
calls ``mkdir`` on them every time. That is msprobe's import, once per process, not a write of the
backend's dumps: it is done here, before any conformance run watches what the backend writes.
docs: plugins/msprobe/README.md says the same to users.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

try:
    import msprobe.pytorch  # noqa: F401
except ImportError:  # the tests that need it skip themselves
    pass
