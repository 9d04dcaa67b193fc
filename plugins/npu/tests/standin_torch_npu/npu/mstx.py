"""Stand-in for ``torch_npu.npu.mstx``: range ids count up from 1, like the real ones (0 = failure)."""

import itertools

from ..recording import LOG

__all__ = ["mstx"]

_ids = itertools.count(1)


class mstx:
    @staticmethod
    def range_start(message: str, stream=None, domain: str = 'default') -> int:
        range_id = next(_ids)
        LOG.record("mstx.range_start", message=message, stream=stream, domain=domain, range_id=range_id)
        return range_id

    @staticmethod
    def range_end(range_id: int, domain: str = 'default'):
        LOG.record("mstx.range_end", range_id=range_id, domain=domain)
