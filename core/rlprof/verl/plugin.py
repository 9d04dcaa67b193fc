"""rlprof's entry in verl's ``verl.plugins`` entry-point group, loaded by ``import verl`` in every
process (verl's ``VERL_USE_EXTERNAL_PLUGINS``, default ``auto``).

Installing rlprof changes nothing by itself: the swap happens only where ``RLPROF_VERL=1`` is set
(see :mod:`rlprof.integrations.verl.install`), which is how it reaches Ray workers before they import verl's
worker modules.
"""

import os

if os.environ.get("RLPROF_VERL") == "1":
    from rlprof.integrations.verl.install import install

    install()
