"""The configuration layer: verl's profiler keys as one declarative schema, where they come from
(YAML, dicts, OmegaConf, dotted overrides), the limits hostile input meets first, and the older
guides' keys migrated.

Imports only the leaves (errors, roles, tool_config, ...). ``from rlprof.config import load_config``
is the public way in; the modules are :mod:`~rlprof.config.schema`, :mod:`~rlprof.config.sources`,
:mod:`~rlprof.config.limits`, :mod:`~rlprof.config.legacy`, :mod:`~rlprof.config.values` and
:mod:`~rlprof.config.schedule`.
"""

from rlprof.config.schema import *  # noqa: F401,F403  (the public names of the schema)
