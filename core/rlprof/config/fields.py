"""How a configuration key is declared: once, as a field of its section's dataclass.

A section of the profiler configuration (``global_profiler``, a role's ``profiler``) is a frozen
dataclass (:mod:`rlprof.config.sections`). Each field a user writes is declared with :func:`key`,
which keeps in the field's metadata the name it has in YAML, the reader that types and checks its
value (``reader(value, key_path)``, ``None`` giving the default) and its documentation. Everything
else is derived from that one declaration:

* the section's key set (:func:`keys_of`), for unknown keys and their did-you-mean;
* reading a section (:func:`read_section`): unknown keys refused, every key read on its own key path;
* the key reference in ``docs/configuration.md`` (:func:`reference`, kept honest by a test);
* what every process records of the section in its manifest (:func:`recorded_values`: the keys
  declared ``recorded``).

Fields declared without :func:`key` are the loader's (a role's ``name``, ``GlobalConfig.caller_steps``):
no YAML sets them.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, asdict, field, fields, is_dataclass
from typing import Any, Callable, Iterator, Mapping

from rlprof.errors import ConfigError, ErrorList, non_string_key, unknown_key

Reader = Callable[[Any, str], Any]

VERL_MARKER = "_target_"
"""verl's instantiation marker (the dataclass a section becomes); accepted in every section, never read."""


def key(reader: Reader, doc: str, *, default: Any = None, default_factory: Callable[[], Any] | None = None,
        name: str | None = None, mirrored: bool = False, recorded: bool = False) -> Any:
    """Declare a configuration key as a dataclass field.

    :param reader: ``reader(value, key_path) -> typed value``; raises :class:`~rlprof.errors.ConfigError`
        naming ``key_path``, the value and what is allowed. ``reader(None, path)`` is the default.
    :param doc: what the key means, its allowed values and what the default does (the reference's text).
    :param name: the key's name in YAML when it differs from the field's (``tool`` for ``tools``).
    :param mirrored: verl copies this ``global_profiler`` key into every role's ``profiler`` section
        (by interpolation); a role may carry it, the global value rules.
    :param recorded: every process records the key's value in its manifest (the ``process`` record's
        ``global_profiler``, :func:`recorded_values`), where the report reads it back.
    """
    metadata = {"reader": reader, "doc": doc, "name": name, "mirrored": mirrored, "recorded": recorded}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def declared(section: type) -> Iterator[tuple[Field, str]]:
    """The key fields of a section dataclass with their YAML names, in declaration order."""
    for f in fields(section):
        if "reader" in f.metadata:
            yield f, f.metadata["name"] or f.name


def keys_of(section: type) -> frozenset[str]:
    """Every key a section accepts: its declared keys and verl's marker."""
    return frozenset(name for _, name in declared(section)) | {VERL_MARKER}


def mirrored_keys(section: type) -> frozenset[str]:
    """The keys of ``section`` that verl mirrors into every role's ``profiler`` section."""
    return frozenset(name for f, name in declared(section) if f.metadata["mirrored"])


def yaml_name(section: type, field_name: str) -> str | None:
    """The YAML name of a field, or None for a field no YAML sets."""
    return next((name for f, name in declared(section) if f.name == field_name), None)


_BAD = object()
"""What :func:`read_section` gets back for a bad value (then read as absent: the key's default)."""


def recorded_values(section: Any) -> dict[str, Any]:
    """The keys of a section object declared ``recorded``, by their YAML names, as plain JSON values
    (tuples as lists, a dataclass value such as a schedule as a mapping)."""
    return {name: _plain(getattr(section, f.name)) for f, name in declared(type(section)) if f.metadata["recorded"]}


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def read_section(section: type, raw: Mapping[str, Any], path: str, accepted: frozenset[str],
                 errors: ErrorList) -> dict[str, Any]:
    """The typed values of ``raw`` by field name, every declared key read on ``<path>.<key>``.

    Each mistake goes to ``errors``, all of them, not only the first: every key not in ``accepted``
    (with a did-you-mean), every bad value (that key then holds its default, so the rest of the
    section can still be checked).
    """
    for name in raw:
        if name not in accepted:
            errors.add(unknown_key(path, name, accepted))
    values = {}
    for f, name in declared(section):
        reader, key_path = f.metadata["reader"], f"{path}.{name}"
        values[f.name] = errors.attempt(reader, raw.get(name), key_path, default=_BAD)
        if values[f.name] is _BAD:
            values[f.name] = reader(None, key_path)
    return values


def string_keys(value: Any, path: str) -> tuple[Any, list[ConfigError]]:
    """``value`` (plain data taken out of a profiler section at ``path``) without the keys that are
    not strings, at any depth, and an error naming each one (where, the key, its type).

    YAML, a dict and a ``DictConfig`` can all hold ``1:``, ``true:`` or ``1.5:`` as keys. Keys are
    names everywhere rlprof reads (sections, tool names, a backend's settings): the loader applies
    this once to every section it takes out of a configuration (:mod:`rlprof.config.schema`), so
    no reader meets a key that is not a string (sorting tool names used to raise TypeError), and
    the rest of the section is still read and checked."""
    errors: list[ConfigError] = []

    def clean(node: Any, where: str) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for k, v in node.items():
                if isinstance(k, str):
                    out[k] = clean(v, f"{where}.{k}")
                else:
                    errors.append(non_string_key(where, k))
            return out
        if isinstance(node, list):
            return [clean(v, f"{where}[{i}]") for i, v in enumerate(node)]
        return node

    return clean(value, path), errors


def shape(section: type, count: int = 3) -> str:
    """What a section must be, for the error when it is not a mapping: ``a mapping of tool, steps, save_path, ...``."""
    names = [name for _, name in declared(section)]
    return f"a mapping of {', '.join(names[:count])}, ..."


def default_of(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def reference(section: type, path: str) -> list[str]:
    """Markdown table rows (``| key | default | meaning |``) for a section's keys, in declaration order."""
    rows = []
    for f, name in declared(section):
        default = _yaml(default_of(f))
        recorded = " Recorded in every process's manifest." if f.metadata["recorded"] else ""
        rows.append(f"| `{path}.{name}` | `{default}` | {' '.join(f.metadata['doc'].split())}{recorded} |")
    return rows


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{}" if not value else str(dict(value))
    return str(value)
