"""Helpers for a backend's ``validate_tool_config``: the checks every ``tool_config.<tool>`` section needs.

Also the one reader of a true/false value (:func:`parse_bool`), used by the core's schema, its legacy
migration and the backends alike, so a boolean is refused in the same words wherever it is written.

Backends own the meaning of their section; these helpers only keep the wording of the errors the
same everywhere (key path, bad value, what is allowed) and the verl-compatibility rule in one place:
keys verl defines for a tool but rlprof does not use are accepted and ignored, anything else is an
error with a did-you-mean.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from rlprof.errors import fail, unknown_key

VERL_COMMON_KEYS = ("name",)
"""Keys verl writes into every tool section (its own bookkeeping); always accepted, never used."""


def check_keys(tool_config: Mapping[str, Any], key_path: str, used: Iterable[str], ignored: Iterable[str] = ()) -> None:
    """Raise :class:`rlprof.ConfigError` for the first key that is neither ``used`` by the backend,
    nor in ``ignored`` (keys verl defines for this tool that the backend does not need), nor verl's
    common ``name``. The did-you-mean only suggests keys the backend uses."""
    used = tuple(used)
    accepted = set(used) | set(ignored) | set(VERL_COMMON_KEYS)
    for key in tool_config:
        if key not in accepted:
            raise unknown_key(key_path, key, used)


def parse_contents(value: Any, key: str, allowed: Iterable[str]) -> tuple[str, ...]:
    """A ``contents`` list (``[cpu, cuda, shapes]``) checked against ``allowed``.

    ``None`` is the empty tuple; the result keeps the user's order without duplicates. Raises
    :class:`rlprof.ConfigError` naming ``key``, the bad value and the allowed names.
    """
    allowed = tuple(allowed)
    wording = f"a list of {', '.join(allowed)} (e.g. [{', '.join(allowed[:2])}])"
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise fail(key, value, wording)
    for item in value:
        if item not in allowed:
            raise fail(key, item, wording)
    return tuple(dict.fromkeys(value))


def parse_bool(value: Any, key: str, default: bool = False) -> bool:
    """A ``true``/``false`` value; ``None`` (absent, or ``null`` in YAML) is ``default``.

    Only real booleans pass: YAML already reads ``true``/``True``/``false``, and a string or a number
    here is far more often a mistake than a choice. Raises :class:`rlprof.ConfigError` naming ``key``.
    """
    if value is None:
        return default
    if not isinstance(value, bool):
        raise fail(key, value, "true or false")
    return value
