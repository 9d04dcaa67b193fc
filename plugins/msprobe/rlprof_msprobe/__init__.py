"""rlprof-msprobe: the ``precision_debugger`` backend (msprobe's ``PrecisionDebugger``, verl's fifth tool).

* :mod:`rlprof_msprobe.settings`  the ``tool_config.precision_debugger`` keys (verl's), checked and normalised
* :mod:`rlprof_msprobe.debugger`  msprobe's one-per-process ``PrecisionDebugger``, imported lazily
* :mod:`rlprof_msprobe.backend`   the hooks: which region is dumped, where, and what is listed
* :mod:`rlprof_msprobe.dumps`     reading a dump: its ``dump.json`` files, tensors and their size (``details``)
* :mod:`rlprof_msprobe.compare`   two runs' dumps side by side: the layers that differ beyond a tolerance

Importing this package never imports msprobe (or torch).
"""
