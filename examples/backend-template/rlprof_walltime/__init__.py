"""rlprof-walltime: an rlprof backend that writes per-region wall-clock timings as a Chrome trace.

The worked example of docs/writing-a-backend.md; copy this directory to start a backend of your own.
"""

__version__ = "0.1.0"
