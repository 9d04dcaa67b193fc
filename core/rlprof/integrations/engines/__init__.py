"""Rollout engines in agent-loop mode: the engine contract (:mod:`.contract`), the adapters rlprof
ships, and the replica participant that drives an engine's own profiler for the core."""
