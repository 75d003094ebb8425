"""Render the hook reference of ``docs/plugins.md`` from the hookspec docstrings (the single source).

``python -m rlcore.hookdocs`` rewrites the generated part of ``docs/plugins.md`` in place; a test fails
when the file is out of date.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from rlcore import hookspecs

BEGIN = "<!-- BEGIN GENERATED HOOK REFERENCE (python -m rlcore.hookdocs) -->"
END = "<!-- END GENERATED HOOK REFERENCE -->"


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


def update_file(path: Path) -> bool:
    """Replace the generated block in ``path``; return True when the file changed."""
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: markers {BEGIN!r} / {END!r} not found")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = head + render_reference() + tail
    if new != text:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/plugins.md")
    print(f"{target}: {'updated' if update_file(target) else 'up to date'}")
