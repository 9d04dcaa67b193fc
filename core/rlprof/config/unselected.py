"""Settings that would be ignored: a ``tool_config.<tool>`` section for a tool that is not selected,
or a configuration written for a tool that was never selected (a guide's example copied without its
``tool`` line). Warnings only; nothing here changes the configuration. ``rlprof check`` also has
the installed backend of each such section check it (:func:`unselected_sections`): a bad value there is
a warning now, and would be an error once the tool is selected.

verl's generated trainer config writes a section for every tool into every role and into
``global_tool_config``, filled with verl's defaults: that is not the user asking for anything. Such
sections are recognised by their structure, not by comparing with a copy of verl's (or a backend's)
defaults, which the core would have to keep in step with every release: a section verl generated
carries verl's ``_target_`` marker (a ``verl.`` class), on itself or on the ``profiler`` /
``global_profiler`` section holding it. In any other section a key asks for something unless its
value is empty (null, false, an empty list or mapping, or a mapping of only such values).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from rlprof.config.fields import VERL_MARKER
from rlprof.config.sections import CORE_TOOL_KEYS
from rlprof.roles import ROLES, profiler_path

BOOKKEEPING = (VERL_MARKER, "name", "controller_nsight_options", "worker_nsight_options")
"""Keys of a tool section that never ask for anything by themselves (verl's bookkeeping, and nsys'
option sets that verl's generated config always fills)."""


def written_by_verl(section: Any) -> bool:
    """``section`` carries verl's ``_target_`` marker: verl's config generator wrote it."""
    marker = section.get(VERL_MARKER) if isinstance(section, Mapping) else None
    return isinstance(marker, str) and marker.startswith("verl.")


def asked_for(section: Any, *, generated: bool = False) -> list[str]:
    """The keys of a tool section that ask for something; none when verl generated it (``generated``:
    the section holding it carries verl's marker)."""
    if generated or not isinstance(section, Mapping) or written_by_verl(section):
        return []
    return [k for k, v in section.items() if k not in BOOKKEEPING and not _empty(v)]


def _empty(value: Any) -> bool:
    if value is None or value is False:
        return True
    if isinstance(value, Mapping):
        return all(_empty(v) for k, v in value.items() if k not in BOOKKEEPING)
    return isinstance(value, (list, tuple)) and not value


def warn_unselected_tool(path: str, tool: str, section: Any, tools: tuple[str, ...], warnings: list[str], *,
                         generated: bool = False) -> None:
    """A ``tool_config.<tool>`` section with settings for a tool that is not selected is ignored: say so."""
    if not tools or tool in tools:
        return
    keys = asked_for(section, generated=generated)
    if keys:
        shown = ", ".join(f"{k}={show(section[k])}" for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
        warnings.append(f"{path}: sets {shown} but {tool} is not a selected tool (global_profiler.tool={show(list(tools))}): "
                        f"ignored; add {tool} to global_profiler.tool to use it")


def unselected_sections(source: Mapping[str, Any], tools: Iterable[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(tool, key path, section)`` for every tool section written for a tool that is not in ``tools``:
    ``global_profiler.global_tool_config.<tool>`` and each role's ``tool_config.<tool>`` (enabled or
    not), each where it is written and as written, without the core's keys (:data:`CORE_TOOL_KEYS`).

    ``source`` is a loaded configuration's :attr:`~rlprof.config.ProfilerConfig.source` (verl's layout).
    What ``rlprof check`` hands each installed backend to check, so that a mistake the user would meet
    on switching tools is said now."""
    tools = set(tools)
    found: list[tuple[str, str, dict[str, Any]]] = []

    def collect(tool_config: Any, path: str) -> None:
        if not isinstance(tool_config, Mapping):
            return
        for tool, section in tool_config.items():
            if tool not in tools and isinstance(section, Mapping):
                found.append((tool, f"{path}.{tool}", {k: v for k, v in section.items() if k not in CORE_TOOL_KEYS}))

    global_section = source.get("global_profiler")
    if isinstance(global_section, Mapping):
        collect(global_section.get("global_tool_config"), "global_profiler.global_tool_config")
    for role in ROLES:
        node: Any = source
        for part in profiler_path(role).split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping):
            collect(node.get("tool_config"), f"{profiler_path(role)}.tool_config")
    return found


def hint_how_to_switch_on(sections: Iterable[tuple[Mapping[str, Any], bool]], *, enabled: bool, steps: Any,
                          warnings: list[str]) -> None:
    """Profiling is off for want of a tool, but the config says which tool it was written for
    (``sections``: each ``tool_config`` mapping with whether verl generated it): say how to switch it on."""
    wanted: dict[str, None] = {}
    for tool_config, generated in sections:
        for tool, tool_section in tool_config.items():
            if asked_for(tool_section, generated=generated):
                wanted.setdefault(tool)
    if wanted and (enabled or steps):
        names = list(wanted)
        switch = f"global_profiler.tool={names[0]}" if len(names) == 1 else f"global_profiler.tool=[{','.join(names)}]"
        warnings.append(f"profiling is off because global_profiler.tool is not set, but tool_config.{names[0]} is: "
                        f"set {switch} to profile with it" + ("" if steps else " (and global_profiler.steps)"))


def show(value: Any) -> str:
    """A value as YAML spells it, long ones shortened, for a warning."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."
