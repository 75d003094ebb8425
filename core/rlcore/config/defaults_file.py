"""Render ``defaults.yaml`` from the typed config tree (:class:`rlcore.config.schema.Sections`): every key
with its default, its ``#:`` docstring as the comment. The file is the user-facing reference (the docs
link it); the loader builds its base config from the dataclasses, and a test fails when the committed file
is stale.

``python -m rlcore.config.defaults_file`` prints the rendering; ``--write`` rewrites the file; ``--check``
exits 1 when the file differs.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml

from rlcore.config.schema import Sections
from rlcore.config.sections.base import field_types, is_section

#: the rendered file, next to this module
DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
#: the command that rewrites it (named by the staleness test)
WRITE_COMMAND = "python -m rlcore.config.defaults_file --write"
HEADER = (
    "# rlcore default configuration, generated from the typed sections in rlcore/config/sections/ (edit them,\n"
    f"# then run `{WRITE_COMMAND}`). Key names follow verl's ppo_trainer.yaml so that a verl\n"
    "# command line works with the entry point replaced by `rlcore run`. Plugins add the sections they own (for\n"
    "# example the FSDP backend adds `fsdp_config`) through the `config_defaults` hook. Unknown keys are errors.\n"
)
_FIELD = re.compile(r"^    (\w+)\s*:")
_COMMENT_COLUMN = 36
_WIDTH = 120


def field_docs(kind: type) -> dict[str, str]:
    """The ``#:`` docstring of each field of the dataclass ``kind`` (its bases' included), by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(kind.__mro__):
        if klass is object:
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        comment: list[str] = []
        for line in lines:
            text = line.strip()
            match = _FIELD.match(line)
            if text.startswith("#:"):
                comment.append(text[2:].strip())
            elif match and comment:
                docs[match.group(1)] = " ".join(comment)
                comment = []
            else:
                comment = []
    return docs


def _scalar(value: Any) -> str:
    """``value`` as YAML on one line (a list or a mapping in flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def _line(indent: str, head: str, doc: str) -> list[str]:
    """``head`` with ``doc`` as its comment: on the same line at the comment column when it fits, else on
    lines above it."""
    text = f"{indent}{head}"
    if not doc:
        return [text]
    inline = f"{text.ljust(_COMMENT_COLUMN - 1)} # {doc}"
    if len(inline) <= _WIDTH:
        return [inline]
    wrapped = textwrap.wrap(doc, _WIDTH - len(indent) - 2, break_on_hyphens=False)
    return [*(f"{indent}# {part}" for part in wrapped), text]


def _render(section: Any, indent: str) -> list[str]:
    """The YAML lines of the dataclass instance ``section``."""
    kind = type(section)
    hints = field_types(kind)
    docs = field_docs(kind)
    lines: list[str] = []
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        doc = docs.get(field.name, "")
        if is_section(hints[field.name]):
            lines += _line(indent, f"{field.name}:", doc)
            lines += _render(value, indent + "  ")
        else:
            lines += _line(indent, f"{field.name}: {_scalar(value)}", doc)
    return lines


def render() -> str:
    """``defaults.yaml`` as rendered from :class:`Sections` (top-level sections separated by a blank line)."""
    sections = Sections()
    blocks = ["\n".join(_section_lines(sections, field.name)) for field in dataclasses.fields(sections)]
    return HEADER + "\n" + "\n\n".join(blocks) + "\n"


def _section_lines(sections: Sections, name: str) -> list[str]:
    """The lines of the top-level section ``name``."""
    return [f"{name}:", *_render(getattr(sections, name), "  ")]


def main(argv: list[str] | None = None) -> int:
    """Print, write or check ``defaults.yaml``; the exit status is 1 when ``--check`` finds it stale."""
    parser = argparse.ArgumentParser(prog="python -m rlcore.config.defaults_file", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help=f"rewrite {DEFAULTS_FILE.name}")
    group.add_argument("--check", action="store_true", help=f"exit 1 when {DEFAULTS_FILE.name} is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DEFAULTS_FILE.write_text(text)
    elif args.check:
        if DEFAULTS_FILE.read_text() != text:
            print(f"{DEFAULTS_FILE} is stale: run `{WRITE_COMMAND}`", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
