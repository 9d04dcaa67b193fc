"""The integrations layer: rlprof inside the frameworks it serves (Ray, verl).

Built on :mod:`rlprof.runtime`; users reach it through thin faces at the top (``rlprof.ray``,
``rlprof.verl``), so these modules can move without breaking an import.
"""
