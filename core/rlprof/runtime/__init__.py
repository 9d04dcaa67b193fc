"""The runtime layer: what happens while training runs.

The resolver (:mod:`~rlprof.runtime.plan`), the capture state machine (:mod:`~rlprof.runtime.capture_machine`),
the process session that turns its decisions into isolated hook calls (:mod:`~rlprof.runtime.session`,
:mod:`~rlprof.runtime.registry`, :mod:`~rlprof.runtime.watchdog`), the public
:class:`~rlprof.runtime.profiler.Profiler`, and the end of a process (:mod:`~rlprof.runtime.exits`,
:mod:`~rlprof.runtime.finish_hook`). Imports the leaves and :mod:`rlprof.config`; never integrations
or analysis.
"""
