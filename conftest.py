"""The repository's root conftest: the suite's tier rule (tests/tiers.py) for every test, rlprof's own and
the plugins'. tests/ is put on the path here so that one module holds the rule and what the helpers import."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "tests"))

pytest_plugins = ["tiers", "sharing"]
