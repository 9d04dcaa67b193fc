"""``rlprof demo``: a GRPO-shaped training run on a local Ray cluster, profiled end to end.

* :mod:`rlprof.demo.grpo`    — the tiny policy and GRPO's pieces (plain torch)
* :mod:`rlprof.demo.worker`  — one hybrid-engine rank (actor + rollout + ref) as a Ray actor
* :mod:`rlprof.demo.trainer` — the single controller's loop, profiled through :mod:`rlprof.ray`
* :mod:`rlprof.demo.command` — flags to config, the run, the report, the files to open (the flags
  themselves: :mod:`rlprof.cli.demo`)
* ``--async``, verl's fully async policy in small: :mod:`rlprof.demo.async_trainer` (the controller),
  :mod:`rlprof.demo.async_worker` (a trainer rank), :mod:`rlprof.demo.async_replica` (a rollout replica
  generating beside it), :mod:`rlprof.demo.samples` (the bounded queue and its staleness limit)

Needs ``ray`` and ``torch`` (``pip install rlprof[ray] rlprof-torch``).
"""

