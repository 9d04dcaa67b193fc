"""The noise rule, as the analysis imports it: :mod:`rlprof.noise` is its one home (a leaf, so the step
metrics every driver computes while training runs judge a late rank by the same rule as the report)."""

from rlprof.noise import (FLOOR_MS, FLOOR_SHARE, MARGIN, bar_ms, between_processes, floor_ms, others_medians,  # noqa: F401
                          spread, stands_clear)
