"""The one exception type for bad input, and the helper that words its messages."""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, TypeVar

T = TypeVar("T")


EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
"""Exit statuses of every ``rlprof`` command (and of plugins' commands): done; ran but failed (nothing
or not everything captured, a regression above the threshold); invalid input."""


class ConfigError(ValueError):
    """Bad profiler configuration. The message names the key path, the bad value and what is allowed.

    Raised by :func:`rlprof.load_config`, by :class:`rlprof.Profiler` creation and by backends'
    ``validate_tool_config``; ``rlprof check`` prints it and exits with status 2.
    """

    def __init__(self, message: str, *, key: str | None = None, value: Any = None, allowed: str | None = None):
        super().__init__(message)
        self.key = key
        self.value = value
        """The bad value as the user wrote it (None where the message names no single value)."""
        self.allowed = allowed
        """What would be accepted there, in words (None where the message says it otherwise)."""

    def as_dict(self) -> dict[str, Any]:
        """``{"key", "value", "allowed", "message"}`` as JSON data: what ``rlprof check --json`` prints
        per error (a value JSON cannot hold, or a long one, as its :func:`describe` text). An error
        built as text in the standard form (``<key>: got <value>; allowed: <allowed>``) without
        ``key``/``value``/``allowed`` (as backends' ``validate_tool_config`` often raise it) gives them
        from its text."""
        message = str(self)
        key, value, allowed = self.named_key(), _as_json(self.value), self.allowed
        got, _, said = message.partition("; allowed: ")
        if allowed is None and said:
            allowed = said
        if value is None and said and ": got " in got:
            value = got.split(": got ", 1)[1]
        return {"key": key, "value": value, "allowed": allowed, "message": message}

    def named_key(self) -> str | None:
        """:attr:`key`, or the dotted key path the message opens with (``a.b.c: ...``) when none was given."""
        if self.key is not None:
            return self.key
        named = _KEY_PATH.match(str(self))
        return named.group(1) if named else None


class ConfigErrors(ConfigError):
    """Several independent mistakes in one configuration, all found in one reading.

    Raised where a reading found more than one (one alone is raised as itself), so every
    ``except ConfigError`` still catches it; :attr:`errors` holds each, and ``str()`` is the list,
    one mistake per line. ``key`` is the first named key path, ``value`` and ``allowed`` the first mistake's."""

    def __init__(self, errors: Iterable[ConfigError]):
        self.errors: list[ConfigError] = list(errors)
        first = self.errors[0]
        lines = "\n".join(f"- {error}" for error in self.errors)
        key = next((k for k in (error.named_key() for error in self.errors) if k is not None), None)
        super().__init__(f"{len(self.errors)} mistakes:\n{lines}", key=key, value=first.value, allowed=first.allowed)


class ErrorList:
    """The mistakes found so far while reading one configuration, so that each independent one is
    reported, not only the first: readers run through :meth:`attempt`, and :meth:`raise_if_any`
    raises what was found at the end. The same mistake found twice (same key, same message) is kept once."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []

    def attempt(self, read: Callable[..., T], *args: Any, default: Any = None, **kwargs: Any) -> T:
        """``read(*args, **kwargs)``, or ``default`` when it raises a ConfigError (kept here)."""
        try:
            return read(*args, **kwargs)
        except ConfigError as exc:
            self.add(exc)
            return default

    def add(self, error: ConfigError) -> None:
        for one in error.errors if isinstance(error, ConfigErrors) else (error,):
            if not any(e.key == one.key and str(e) == str(one) for e in self.errors):
                self.errors.append(one)

    def has(self, key: str) -> bool:
        """Some mistake found so far is at ``key`` (or inside it: ``key.<sub key>``)."""
        return any(e.key == key or (e.key or "").startswith(key + ".") for e in self.errors)

    def __len__(self) -> int:
        return len(self.errors)

    def raise_if_any(self) -> None:
        """Raise the one mistake found, or all of them as :class:`ConfigErrors`; nothing when none."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


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
    return ConfigError(f"{key}: got {describe(value)}; allowed: {allowed}", key=key, value=value, allowed=allowed)


_KEY_PATH = re.compile(r"^([A-Za-z_][\w\-]*(?:\.[\w\-]+)+): ")
"""A dotted key path opening a message (``a.b.c: ...``)."""


def _as_json(value: Any, limit: int = 1000) -> Any:
    import json  # here, not at import: keeps ``import rlprof`` light

    try:
        if len(json.dumps(value)) <= limit:
            return value
    except (TypeError, ValueError, RecursionError):
        pass
    return describe(value)


def did_you_mean(word: Any, choices: Iterable[Any]) -> str:
    """`` (did you mean 'steps'?)`` or an empty string when nothing is close (or ``word`` is no string)."""
    import difflib  # here, not at import: keeps ``import rlprof`` light

    if not isinstance(word, str) or len(word) > 200:
        return ""
    close = difflib.get_close_matches(word, [c for c in choices if isinstance(c, str)], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def non_string_key(mapping: str, key: Any) -> ConfigError:
    """The error for a key that is not a string in the mapping at key path ``mapping`` ('' for the
    top level): ``<mapping>: got the key 1 (int); allowed: ...keys must be strings...``."""
    spelled = "true" if key is True else "false" if key is False else "null" if key is None else str(key)[:40]
    quoted = f"; in YAML write it in quotes: '{spelled}'" if key is None or isinstance(key, (int, float)) else ""
    allowed = f"a string key (keys must be strings{quoted})"
    return ConfigError(f"{mapping or 'config'}: got the key {describe(key)}; allowed: {allowed}",
                       key=f"{mapping}.{spelled}" if mapping else None, value=key, allowed=allowed)


def unknown_key(section: str, key: Any, known: Iterable[str]) -> ConfigError:
    known = sorted(k for k in known if isinstance(k, str) and not k.startswith("_"))
    if not isinstance(key, str):
        return non_string_key(section, key)
    if len(key) > 200:
        key = key[:100] + "..."
    path = f"{section}.{key}" if section else key
    return ConfigError(
        f"{path}: unknown key{did_you_mean(key, known)}; known keys in {section or 'this section'}: {', '.join(known)}",
        key=path, value=key, allowed=f"the keys {', '.join(known)}",
    )
