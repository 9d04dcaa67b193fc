"""pytest plugin for backend authors (registered through the ``pytest11`` entry point)."""
