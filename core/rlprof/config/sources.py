"""Reading configuration input into one OmegaConf tree: a YAML file, a mapping, a ``DictConfig``,
then dotted overrides. Every way this can fail becomes a :class:`~rlprof.errors.ConfigError` that
says which input (file, override) and what is allowed; sizes are checked first (:mod:`rlprof.config.limits`).

Overrides follow Hydra's command-line grammar as far as a profiler needs it: ``key=value``,
``+key=value`` (add), ``++key=value`` (add or replace) and ``~key`` (delete the key). Values are
YAML (``[1,2]``, ``true``, ``null``), as in Hydra and OmegaConf's ``from_dotlist``.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

from rlprof.errors import ConfigError, describe
from rlprof.config.limits import MAX_DEPTH, MAX_TEXT, MAX_VALUES, check_text, check_tree

_KEY = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")
_SECTIONS_HINT = "a mapping of sections (global_profiler, actor_rollout_ref, critic, ...)"
_SCALARS = (str, int, float, bool, type(None), bytes, Path)


def read_source(source: Any, OmegaConf) -> Any:
    """The configuration ``source`` as an OmegaConf ``DictConfig`` (a ``DictConfig`` is returned as is)."""
    if source is None:
        return OmegaConf.create({})
    if isinstance(source, (str, os.PathLike)):
        return _read_file(source, OmegaConf)
    if OmegaConf.is_config(source):
        if not OmegaConf.is_dict(source):
            raise ConfigError(f"config: got an OmegaConf {type(source).__name__}; allowed: {_SECTIONS_HINT}")
        check_tree(source, "")  # before anything copies or resolves it: both recurse once per level
        return source
    if isinstance(source, Mapping):
        check_tree(source, "")
        return _create(_plain(source, ""), "config", OmegaConf)
    raise ConfigError(f"config: got {describe(source)}; allowed: a YAML path, a mapping or an OmegaConf DictConfig")


def _read_file(source: Any, OmegaConf) -> Any:
    shown = repr(os.fspath(source)) if isinstance(source, (str, os.PathLike)) else repr(source)
    where = f"config file {shown}"
    try:
        path = Path(source)
        if path.is_dir():
            raise ConfigError(f"{where}: is a directory; allowed: a YAML file (or key=value overrides)")
        if not path.is_file():
            raise ConfigError(f"{where}: not found (give a YAML file or key=value overrides)")
        if path.stat().st_size > MAX_TEXT:
            raise ConfigError(f"{where}: {path.stat().st_size} bytes; allowed: at most {MAX_TEXT}")
        text = path.read_text(encoding="utf-8")
    except ConfigError:
        raise
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); allowed: a YAML file") from None
    except (OSError, ValueError) as exc:  # unreadable, a NUL byte or an over-long name in the path
        raise ConfigError(f"{where}: cannot be read ({_first_line(exc)}); allowed: a readable YAML file") from None
    loaded = load_yaml(text, where)
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, Mapping):
        kind = "list" if isinstance(loaded, list) else f"{type(loaded).__name__} value"
        raise ConfigError(f"{where}: the top level is a {kind} ({_short(loaded)}); allowed: {_SECTIONS_HINT}")
    try:
        check_tree(loaded, "")
    except ConfigError as exc:
        if "&" in text and "*" in text and str(exc).startswith("config: more than"):
            # OmegaConf < 2.4 has no alias limit of its own: say what OmegaConf 2.4's loader says
            raise ConfigError(f"{where}: YAML aliases expand to too many values (more than {MAX_VALUES}); "
                              f"allowed: a configuration whose aliases expand to at most {MAX_VALUES} values") from None
        raise
    return _create(loaded, where, OmegaConf)


def load_yaml(text: str, where: str) -> Any:
    """Parse YAML ``text`` as OmegaConf does (its loader), with the size checks first and a depth
    guard while composing; ``where`` names the input in errors."""
    check_text(text, where)
    import yaml

    try:
        return yaml.load(text, Loader=_guarded_loader())
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        message = " ".join(str(exc).split())
        if "expansion exceeds" in message:  # OmegaConf's loader counts what aliases expand to
            raise ConfigError(f"{where}: YAML aliases expand to too many values ({message.split('. See')[0]}); "
                              f"allowed: a configuration whose aliases expand to at most {MAX_VALUES} values") from None
        raise ConfigError(f"{where}: not valid YAML: {message[:500]}") from None
    except (RecursionError, MemoryError, ValueError, TypeError, OverflowError) as exc:
        raise ConfigError(f"{where}: cannot be read as YAML: {_first_line(exc)}") from None


_LOADER: Any = None


def _guarded_loader():
    """OmegaConf's YAML loader (same scalars, same alias limit), composing at most MAX_DEPTH levels."""
    global _LOADER
    if _LOADER is None:
        try:
            from omegaconf._yaml import get_yaml_loader  # OmegaConf >= 2.4 (alias expansion limit)
        except ImportError:
            try:
                from omegaconf._utils import get_yaml_loader  # OmegaConf 2.1 - 2.3
            except ImportError:  # pragma: no cover - the plain safe loader reads the same profiler keys
                import yaml

                get_yaml_loader = lambda **_: yaml.SafeLoader  # noqa: E731
        try:  # the same limit as rlprof.config.limits.check_tree applies to mappings
            base = get_yaml_loader(max_yaml_expanded_nodes=MAX_VALUES)
        except TypeError:  # older OmegaConf: no limit of its own; check_tree counts the expansion
            base = get_yaml_loader()

        class GuardedLoader(base):  # type: ignore[misc, valid-type]
            _depth = 0

            def compose_node(self, parent, index):
                self._depth += 1
                try:
                    if self._depth > MAX_DEPTH:
                        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH} "
                                          "levels of mappings and lists")
                    return super().compose_node(parent, index)
                finally:
                    self._depth -= 1

        _LOADER = GuardedLoader
    return _LOADER


def _create(data: Any, where: str, OmegaConf) -> Any:
    try:
        return OmegaConf.create(data)
    except Exception as exc:  # omegaconf's validation: unsupported key or value types, bad interpolation syntax
        found = _unparsable(data, "", OmegaConf)
        if found is not None:  # a string OmegaConf reads as a broken interpolation: named by its key
            path, value = found
            raise ConfigError(f"{path}: got {value!r}, which OmegaConf cannot parse ({_first_line(exc)}); allowed: a "
                              "complete interpolation such as ${other.key}, or no '${' in the value") from None
        raise ConfigError(f"{where}: cannot be used as a configuration: {_first_line(exc)}") from None


def _unparsable(value: Any, path: str, OmegaConf) -> tuple[str, str] | None:
    """The key path and value of the first string under ``value`` that OmegaConf refuses on its own (a ``${``
    that opens no complete interpolation), else None."""
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    elif isinstance(value, str) and "${" in value:
        try:
            OmegaConf.create({"value": value})
        except Exception:
            return path, value
        return None
    else:
        return None
    for where, item in items:
        found = _unparsable(item, where, OmegaConf)
        if found is not None:
            return found
    return None


def _plain(value: Any, path: str) -> Any:
    """Mappings as dicts, tuples as lists; anything else that is not a plain value is refused with
    its key path. Keys stay as they are (:func:`check_tree` refused those no configuration can hold;
    a non-string key inside a profiler section is the schema's to name). Depth is already bounded by
    :func:`check_tree`."""
    if isinstance(value, Mapping):
        return {k: _plain(v, f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, _SCALARS) or _is_omegaconf(value):
        return value
    raise ConfigError(f"{path or 'config'}: got {describe(value)}; allowed: a mapping, list, string, number, bool or null",
                      key=path or None)


def _is_omegaconf(value: Any) -> bool:
    from omegaconf import OmegaConf

    return OmegaConf.is_config(value)


# ----------------------------------------------------------------------------------- overrides


def apply_overrides(root: Any, overrides: Iterable[Any], OmegaConf) -> Any:
    """``root`` with the dotted overrides applied in order (a copy: the caller's object is untouched).
    Each failure names the override it comes from."""
    if overrides is None:
        return root
    if isinstance(overrides, (str, bytes)):
        overrides = [overrides]
    try:
        items = [o for o in overrides if o != "" and o is not None]
    except TypeError:
        raise ConfigError(f"overrides: got {describe(overrides)}; allowed: a list of 'key=value' strings") from None
    if not items:
        return root
    root = copy.deepcopy(root)
    OmegaConf.set_readonly(root, False)
    OmegaConf.set_struct(root, False)
    for item in items:
        _apply_one(root, item, OmegaConf)
    return root


def _apply_one(root: Any, item: Any, OmegaConf) -> None:
    if not isinstance(item, str):
        raise ConfigError(f"override {describe(item)}: allowed: a 'key=value' string, e.g. global_profiler.steps=[1,2]")
    where = f"override {_short(item)}"
    text = item.strip()
    if text.startswith("~"):
        key = text[1:]
        if "=" in key:
            raise ConfigError(f"{where}: '~key=value' (delete only when equal) is not supported; allowed: ~key to delete the key")
        _check_key(key, where)
        _delete(root, key, where, OmegaConf)
        return
    if "=" not in text:
        raise ConfigError(f"{where}: expected key=value, e.g. global_profiler.steps=[1,2] (or ~key to delete a key)")
    key, value_text = text.split("=", 1)
    key = key[2:] if key.startswith("++") else key[1:] if key.startswith("+") else key
    _check_key(key, where)
    value = load_yaml(value_text, where)
    check_tree(value, key)
    try:
        OmegaConf.update(root, key, _plain(value, key), merge=True, force_add=True)
    except ConfigError:
        raise
    except Exception as exc:  # e.g. a key below a value that is not a mapping
        raise ConfigError(f"{where}: cannot be applied: {_first_line(exc)}", key=key) from None


def _check_key(key: str, where: str) -> None:
    if not _KEY.match(key):
        raise ConfigError(f"{where}: the key {key!r} is not a dotted key path; allowed: names of letters, digits, '_' and '-' "
                          "joined by '.', e.g. actor_rollout_ref.actor.profiler.ranks")


def _delete(root: Any, key: str, where: str, OmegaConf) -> None:
    parent_key, _, name = key.rpartition(".")
    try:
        parent = OmegaConf.select(root, parent_key, throw_on_missing=False) if parent_key else root
    except Exception as exc:
        raise ConfigError(f"{where}: cannot be applied: {_first_line(exc)}", key=key) from None
    if not OmegaConf.is_dict(parent) or name not in parent:
        raise ConfigError(f"{where}: {key} is not set, so there is nothing to delete; allowed: ~ followed by a key that is set",
                          key=key)
    del parent[name]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
