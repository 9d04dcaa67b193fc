"""The one exception type for bad input, and the helper that words its messages."""

from __future__ import annotations

from typing import Any, Iterable


EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
"""Exit statuses of every ``rlprof`` command (and of plugins' commands): done; ran but failed (nothing
or not everything captured, a regression above the threshold); invalid input."""


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


def describe(value: Any, limit: int = 200) -> str:
    """``'abc' (str)``: the value as the user wrote it, with its type (long values shortened)."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__, or one too deep to print
        text = f"<{type(value).__name__} object>"
    if len(text) > limit:
        text = text[: limit - 5] + " ...]" if text[:1] == "[" else text[: limit - 4] + " ..."
    return f"{text} ({type(value).__name__})"


def fail(key: str, value: Any, allowed: str) -> ConfigError:
    """Build the standard error: ``<key>: got <value> (<type>); allowed: <allowed>``."""
    return ConfigError(f"{key}: got {describe(value)}; allowed: {allowed}", key=key)


def did_you_mean(word: Any, choices: Iterable[Any]) -> str:
    """`` (did you mean 'steps'?)`` or an empty string when nothing is close (or ``word`` is no string)."""
    import difflib  # here, not at import: keeps ``import rlprof`` light

    if not isinstance(word, str) or len(word) > 200:
        return ""
    close = difflib.get_close_matches(word, [c for c in choices if isinstance(c, str)], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key(section: str, key: Any, known: Iterable[str]) -> ConfigError:
    known = sorted(k for k in known if isinstance(k, str) and not k.startswith("_"))
    if not isinstance(key, str):
        return ConfigError(
            f"{section or 'config'}: got the key {describe(key)}; allowed: string keys: {', '.join(known)}",
            key=section or None,
        )
    if len(key) > 200:
        key = key[:100] + "..."
    path = f"{section}.{key}" if section else key
    return ConfigError(
        f"{path}: unknown key{did_you_mean(key, known)}; known keys in {section or 'this section'}: {', '.join(known)}",
        key=path,
    )
