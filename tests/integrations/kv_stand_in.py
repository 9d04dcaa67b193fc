"""A stand-in for Ray's internal key-value store (``ray.experimental.internal_kv``), for unit tests of the verl
drop-in's run signals (:mod:`rlprof.integrations.verl.run_signals`): a dict with the three calls rlprof makes,
namespaces kept apart. The real store carries the signals in the slow tests (real Ray actors, verl's trainer)."""

from __future__ import annotations


class StandInKV:
    def __init__(self):
        self.data: dict[tuple[str, str], bytes] = {}

    def _internal_kv_put(self, key, value, overwrite=True, namespace=None):
        self.data[(namespace, key)] = value

    def _internal_kv_get(self, key, namespace=None):
        return self.data.get((namespace, key))

    def _internal_kv_list(self, prefix, namespace=None):
        return [key.encode() for ns, key in self.data if ns == namespace and key.startswith(prefix)]
