"""Size limits on configuration input, checked before any expensive work.

A profiler configuration is a few dozen keys; verl 0.9.1's whole generated trainer config is 1 059
values nested 7 deep (about 40 kB of YAML). Input far beyond that is a mistake or an attack, and the
libraries behind the loader do not defend themselves: PyYAML's composer recurses once per nesting
level (50 000 nested brackets exhaust the stack), OmegaConf copies every shared reference (a
"billion laughs" alias bomb expands exponentially), ``rlprof check`` used to plan every rank. So
the text is pre-scanned and the data walked, iteratively and with a budget, first; what is too big
is a :class:`~rlprof.errors.ConfigError` that names where and what the limit is.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any, Mapping

from rlprof.errors import ConfigError, non_string_key

MAX_DEPTH = 64
"""Deepest nesting of mappings/lists (verl's generated trainer config: 7)."""
MAX_VALUES = 20_000
"""Most values in one configuration, counting a value each time it is reached (so shared
references and YAML aliases count as often as OmegaConf would copy them). OmegaConf spends about
0.1 ms on each value it creates: this bounds loading to a couple of seconds."""
MAX_LIST = 10_000
"""Longest list (e.g. ``ranks``; ``all_ranks: true`` selects any number of ranks)."""
MAX_TEXT = 1024 * 1024
"""Largest YAML file or override text, in characters."""
MAX_INTERPOLATIONS = 64
"""Most ``${`` in one string value: OmegaConf's interpolation grammar (ANTLR) takes seconds to
minutes to reject thousands of nested ``${``."""


KEY_TYPES = (str, int, float, bool, bytes, Enum)
"""The key types an OmegaConf configuration can hold (its ``DictKeyType``). Any other key (``null``
in YAML, a tuple in a dict) is refused wherever it is; inside the profiler sections only strings are
keys (:func:`rlprof.config.fields.string_keys`)."""


def check_text(text: str, where: str) -> None:
    """Refuse YAML text that is too large or nests deeper than :data:`MAX_DEPTH`, without parsing it.

    The depth is a cheap estimate (flow brackets ``[ {`` outside quoted scalars and comments, plus
    indentation levels, plus ``- `` block-sequence markers opening a line) that rejects bracket
    floods in linear time; the YAML loader of :mod:`rlprof.config.sources` still counts the exact depth
    while composing, so a case this scan misjudges cannot recurse deeply either.
    """
    if len(text) > MAX_TEXT:
        raise ConfigError(f"{where}: {len(text)} characters; allowed: at most {MAX_TEXT}")
    depth = _text_depth(text)
    if depth > MAX_DEPTH:
        raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH} levels of mappings and lists")


def _text_depth(text: str) -> int:
    deepest = 0
    flow = 0  # open [ { brackets (they may span lines)
    indents: list[int] = []  # indentation of the enclosing block lines
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if flow == 0:
            if not stripped or stripped.startswith("#"):
                continue
            indent = len(line) - len(stripped)
            while indents and indents[-1] >= indent:
                indents.pop()
            indents.append(indent)
            dashes = 0
            rest = stripped
            while rest.startswith("- ") or rest == "-":
                dashes += 1
                rest = rest[2:].lstrip(" ")
            deepest = max(deepest, len(indents) + dashes)
        flow, seen = _scan_flow(line, flow)
        deepest = max(deepest, len(indents) + seen)
    return deepest


def _scan_flow(line: str, flow: int) -> tuple[int, int]:
    """Track ``[``/``{`` depth through one line, skipping quoted scalars and comments.

    A quote opens a quoted scalar only where YAML lets one start (line start, after whitespace,
    ``[ { , :``); elsewhere it is part of a plain scalar, as YAML reads it. Returns the depth at
    the end of the line and the deepest depth seen on it.
    """
    seen = flow
    i, n = 0, len(line)
    prev = " "
    while i < n:
        ch = line[i]
        if ch in "\"'" and prev in " \t[{,:":
            end = _quoted_end(line, i)
            if end < 0:  # a quoted scalar running onto the next line: the rest of this line is text
                break
            i, prev = end + 1, ch
            continue
        if ch == "#" and prev in " \t":
            break
        if ch in "[{":
            flow += 1
            seen = max(seen, flow)
        elif ch in "]}":
            flow = max(0, flow - 1)
        prev = ch
        i += 1
    return flow, seen


def _quoted_end(line: str, start: int) -> int:
    quote = line[start]
    i = start + 1
    while i < len(line):
        ch = line[i]
        if quote == '"' and ch == "\\":
            i += 2
            continue
        if ch == quote:
            if quote == "'" and i + 1 < len(line) and line[i + 1] == "'":
                i += 2
                continue
            return i
        i += 1
    return -1


def check_tree(value: Any, where: str) -> None:
    """Walk plain data (dicts, lists, scalars, OmegaConf nodes) iteratively and refuse it when it nests deeper than
    :data:`MAX_DEPTH`, holds a list longer than :data:`MAX_LIST`, reaches more than
    :data:`MAX_VALUES` values (a value shared N times counts N times; a cycle is too deep) or has a key
    no configuration can hold (not one of :data:`KEY_TYPES`)."""
    budget = MAX_VALUES
    stack: list[tuple[Any, str, int]] = [(value, where, 0)]
    too_many = ConfigError(f"{where or 'config'}: more than {MAX_VALUES} values (counting each use of a shared value or "
                           f"YAML alias); allowed: at most {MAX_VALUES}", key=where or None)
    while stack:
        node, path, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise too_many
        node = _omegaconf_content(node, path)
        if isinstance(node, str):
            if len(node) > MAX_TEXT:
                raise ConfigError(f"{short_path(path)}: a string of {len(node)} characters; allowed: at most {MAX_TEXT}", key=path)
            if node.count("${") > MAX_INTERPOLATIONS:
                raise ConfigError(f"{short_path(path)}: a string with {node.count('${')} interpolations ('${{'); allowed: at most "
                                  f"{MAX_INTERPOLATIONS}", key=path)
            if "${" in node and node.count("[") + node.count("{") > 2 * MAX_INTERPOLATIONS:
                raise ConfigError(f"{short_path(path)}: an interpolation with more than {2 * MAX_INTERPOLATIONS} brackets; "
                                  f"allowed: at most {2 * MAX_INTERPOLATIONS} ('${{', '[', '{{' together)", key=path)
            continue
        if isinstance(node, Mapping):
            children = list(node.items())
            for key, _ in children:
                if not isinstance(key, KEY_TYPES):
                    raise non_string_key(short_path(path), key)
        elif isinstance(node, (list, tuple)):
            if len(node) > MAX_LIST:
                raise ConfigError(f"{short_path(path)}: a list of {len(node)} items; allowed: at most {MAX_LIST}", key=path)
            children = list(enumerate(node))
        else:
            continue
        if depth >= MAX_DEPTH:
            raise ConfigError(f"{short_path(path)}: nested more than {MAX_DEPTH} levels deep; allowed: at most {MAX_DEPTH} "
                              "levels of mappings and lists", key=path)
        if len(children) > budget:
            raise too_many
        for key, child in children:
            stack.append((child, f"{path}.{key}" if path else str(key), depth + 1))


def _omegaconf_content(node: Any, path: str) -> Any:
    """``node`` itself unless it is an OmegaConf node; then what :func:`check_tree` walks instead: a
    value node's raw value (an interpolation stays its ``${...}`` text), a container as a dict or list
    of its child nodes.

    A ``DictConfig`` handed in by the caller was built outside rlprof's limits: copying or resolving
    it (``copy.deepcopy``, ``OmegaConf.to_container``) recurses once per level, so a list nested 600
    deep raises ``RecursionError`` there. Reading its nodes here is iterative and resolves nothing.
    """
    omegaconf = sys.modules.get("omegaconf")  # a DictConfig exists only once omegaconf is imported
    if omegaconf is None or not isinstance(node, omegaconf.Node):
        return node
    try:
        if isinstance(node, omegaconf.ValueNode) or node._is_none() or node._is_missing() or node._is_interpolation():
            return node._value()
        if isinstance(node, omegaconf.ListConfig):
            return [node._get_node(i) for i in range(len(node))]
        return {k: node._get_node(k) for k in node.keys()}
    except Exception as exc:  # omegaconf internals this version does not have, a node it cannot read
        raise ConfigError(f"{short_path(path) or 'config'}: cannot be read: {type(exc).__name__}: {str(exc)[:200]}; "
                          "allowed: a DictConfig of mappings, lists and plain values", key=path or None) from None


def short_path(path: str, limit: int = 160) -> str:
    """A key path for a message: long ones (a deep or cyclic structure) keep their start and end."""
    return path if len(path) <= limit else f"{path[: limit // 2]}...{path[-limit // 2:]}"
