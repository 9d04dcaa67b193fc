"""The configuration layer: verl's profiler keys as one declarative schema, where they come from
(YAML, dicts, OmegaConf, dotted overrides), the limits hostile input meets first, and the older
guides' keys migrated.

Imports only the leaves (errors, roles, tool_config, ...). ``from rlprof.config import load_config``
is the public way in. The modules: :mod:`~rlprof.config.sections` declares every key once (a
documented dataclass field each), :mod:`~rlprof.config.fields` derives key sets and reading from
those declarations, :mod:`~rlprof.config.values` and :mod:`~rlprof.config.schedule` read single
values, :mod:`~rlprof.config.schema` loads and adds the checks that span keys,
:mod:`~rlprof.config.unselected` warns about settings that would be ignored,
:mod:`~rlprof.config.sources`, :mod:`~rlprof.config.limits` and :mod:`~rlprof.config.legacy` read,
bound and migrate the input.
"""

from rlprof.config.schema import *  # noqa: F401,F403  (the public names of the schema)
