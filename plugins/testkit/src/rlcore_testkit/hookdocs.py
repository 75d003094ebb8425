"""Render the plugin reference pages from their single sources: the hook reference of ``docs/plugins.md``
from the hookspec docstrings, and the name reference of ``docs/api.md`` from :mod:`rlcore.api` (its groups and
each name's docstring).

``python -m rlcore_testkit.hookdocs`` rewrites the generated parts of both files in place; tests fail when either is
out of date.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

from rlcore import hookspecs

BEGIN = "<!-- BEGIN GENERATED HOOK REFERENCE (python -m rlcore_testkit.hookdocs) -->"
END = "<!-- END GENERATED HOOK REFERENCE -->"
API_BEGIN = "<!-- BEGIN GENERATED API REFERENCE (python -m rlcore_testkit.hookdocs) -->"
API_END = "<!-- END GENERATED API REFERENCE -->"


def hook_names() -> list[str]:
    """Every hook spec, in the order they are defined in :mod:`rlcore.hookspecs`."""
    specs = [(name, fn) for name, fn in vars(hookspecs).items() if hasattr(fn, f"{hookspecs.PROJECT}_spec")]
    return [name for name, fn in sorted(specs, key=lambda item: inspect.getsourcelines(item[1])[1])]


def signature(name: str) -> str:
    """``name(arg1, arg2)`` exactly as the docs must show it."""
    params = inspect.signature(getattr(hookspecs, name)).parameters
    return f"{name}({', '.join(params)})"


def render_reference() -> str:
    """The generated Markdown: one section per hook with its signature, docstring and example."""
    parts = [BEGIN, ""]
    for name in hook_names():
        doc = inspect.cleandoc(getattr(hookspecs, name).__doc__ or "")
        text, _, example = doc.partition("Example::")
        parts += [f"### `{signature(name)}`", "", text.strip(), ""]
        if example.strip():
            parts += ["```python", inspect.cleandoc(example), "```", ""]
    parts.append(END)
    return "\n".join(parts)


def api_groups() -> list[tuple[str, list[str]]]:
    """The names of :mod:`rlcore.api` in the groups of its ``_LAZY`` table (a ``# comment`` line opens a group)."""
    import rlcore.api
    from rlcore.api import read_lazy_table

    groups: dict[str, list[str]] = {}
    for entry in read_lazy_table(Path(rlcore.api.__file__).read_text()):
        groups.setdefault(entry.group, []).append(entry.name)
    return list(groups.items())


def _summary(name: str) -> str:
    """The first paragraph of public ``name``'s docstring (a click command: its help; a constant or an alias: its
    ``#:`` comment)."""
    import click

    import rlcore.api

    value = getattr(rlcore.api, name)
    if isinstance(value, click.Command):
        return " ".join(inspect.cleandoc(value.help or "").split("\n\n")[0].split())
    if inspect.isclass(value) or inspect.isfunction(inspect.unwrap(value)) or inspect.ismodule(value):  # cached too
        return " ".join(inspect.cleandoc(value.__doc__ or "").split("\n\n")[0].split())
    module, attribute = rlcore.api._target(name)
    package = importlib.import_module(module)
    files = [Path(package.__file__ or "")]
    if files[0].name == "__init__.py":  # a package re-exports: look in its modules too
        files += sorted(files[0].parent.glob("*.py"))
    for path in files:
        lines = path.read_text().splitlines()
        for index, line in enumerate(lines):
            if re.match(rf"{attribute}\b\s*(:|=)", line):
                start = index
                while start and lines[start - 1].startswith("#:"):
                    start -= 1
                return " ".join(comment[2:].strip() for comment in lines[start:index])
    return ""


def render_api_reference() -> str:
    """The generated Markdown of ``docs/api.md``: per group, each public name with its module and summary."""
    import rlcore.api

    parts = [API_BEGIN, ""]
    for title, names in api_groups():
        parts += [f"### {title[0].upper()}{title[1:]}", ""]
        for name in names:
            module = rlcore.api._target(name)[0]
            parts.append(f"- **`{name}`** (`{module}`): {_summary(name)}".rstrip())
        parts.append("")
    parts.append(API_END)
    return "\n".join(parts)


def update_file(path: Path, begin: str = BEGIN, end: str = END, rendered: str | None = None) -> bool:
    """Replace the generated block between ``begin`` and ``end`` in ``path`` with ``rendered`` (default: the hook
    reference); return True when the file changed."""
    text = path.read_text()
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: markers {begin!r} / {end!r} not found")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    new = head + (render_reference() if rendered is None else rendered) + tail
    if new != text:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    docs = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs")
    hooks, api = docs / "plugins.md", docs / "api.md"
    print(f"{hooks}: {'updated' if update_file(hooks) else 'up to date'}")
    print(f"{api}: {'updated' if update_file(api, API_BEGIN, API_END, render_api_reference()) else 'up to date'}")
