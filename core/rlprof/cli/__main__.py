"""``python -m rlprof.cli``: the same as the ``rlprof`` command."""

import sys

from rlprof.cli import main

sys.exit(main())
