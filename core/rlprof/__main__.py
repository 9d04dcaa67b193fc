"""``python -m rlprof``: the same as the ``rlprof`` command (for a shell where the venv is not on PATH)."""

import sys

from rlprof.cli import main

sys.exit(main())
