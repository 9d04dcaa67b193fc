"""The one exception type for bad input, and the helper that words its messages."""

from __future__ import annotations

from typing import Any, Iterable


class ConfigError(ValueError):
    """Bad profiler configuration. The message names the key path, the bad value and what is allowed.

    Raised by :func:`rlprof.load_config`, by :class:`rlprof.Profiler` creation and by backends'
    ``validate_tool_config``; ``rlprof check`` prints it and exits with status 2.
    """

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.key = key


class BackendError(ConfigError):
    """A selected backend is not installed, or its entry point fails to import."""


def describe(value: Any) -> str:
    """``'abc' (str)``: the value as the user wrote it, with its type."""
    return f"{value!r} ({type(value).__name__})"


def fail(key: str, value: Any, allowed: str) -> ConfigError:
    """Build the standard error: ``<key>: got <value> (<type>); allowed: <allowed>``."""
    return ConfigError(f"{key}: got {describe(value)}; allowed: {allowed}", key=key)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'steps'?)`` or an empty string when nothing is close."""
    import difflib  # here, not at import: keeps ``import rlprof`` light

    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(section: str, key: str, known: Iterable[str]) -> ConfigError:
    known = sorted(k for k in known if not k.startswith("_"))
    path = f"{section}.{key}" if section else key
    return ConfigError(
        f"{path}: unknown key{did_you_mean(key, known)}; known keys in {section or 'this section'}: {', '.join(known)}",
        key=path,
    )
