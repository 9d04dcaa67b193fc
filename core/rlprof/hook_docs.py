"""docs/writing-a-backend.md's hook sections, generated from the spec's docstrings (:func:`hook_reference`): one source."""

from __future__ import annotations

from typing import Sequence

from rlprof import hookspecs

def hook_reference(hooks: Sequence[str]) -> str:
    """The sections of docs/writing-a-backend.md for ``hooks``, generated from :mod:`rlprof.hookspecs` (a test keeps
    the page equal to it): per hook its name, the first line of its docstring quoted, its exact
    signature and the rest of the docstring, in Markdown. One source: a hook added here is documented
    by regenerating the page, never by writing it twice."""
    import inspect
    import re

    def markdown(text: str) -> str:
        text = re.sub(r":\w+:`~rlprof\.context\.(\w+)`", lambda m: f"[`{m.group(1)}`](#{m.group(1).lower()})", text)
        text = re.sub(r":\w+:`~[\w.]*?(\w+)`", r"`\1`", text)  # :func:`~rlprof.Profiler` -> `Profiler`
        text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
        return text.replace("``", "`")

    sections = []
    for hook in hooks:
        spec = getattr(hookspecs, hook)
        lines = inspect.getdoc(spec).splitlines()
        body: list[str] = []
        code = False
        for line in lines[1:]:
            field = re.match(r":(param (\w+)|returns|raises ([\w.]+)):\s*(.*)", line)
            if code and (line.startswith("    ") or not line.strip()):
                body.append(line[4:])  # the example, as written
                continue
            if code:
                body[-1:] = ["```", ""] if not body[-1] else [*body[-1:], "```"]
                code = False
            if field:
                name = field.group(2) and f"`{field.group(2)}`" or field.group(3) and f"raises `{field.group(3)}`" or "returns"
                body.append(f"* {name}: {markdown(field.group(4))}")
            elif line.startswith("    ") and body and body[-1].startswith("* "):
                body[-1] += " " + markdown(line.strip())  # a field's continuation
            elif line.rstrip().endswith("::"):  # an example follows, indented
                body += [markdown(line.rstrip()[:-3] if line.rstrip().endswith(" ::") else line.rstrip()[:-1]), "", "```python"]
                code = True
            else:
                body.append(markdown(line))
        while body and not body[-1].strip():
            body.pop()
        while body and not body[0].strip():
            body.pop(0)
        if code:
            body.append("```")
        text = "\n".join(line for i, line in enumerate(body) if not (line == "" and i > 0 and body[i - 1] == "```python"))
        signature = str(inspect.signature(spec)).replace("'", "")
        sections.append(f"### {hook}\n\n> {markdown(lines[0])}\n\n```python\ndef {hook}{signature}\n```\n\n{text}\n")
    return "\n".join(sections)
