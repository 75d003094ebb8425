"""The one reader of :mod:`rlcore.api`'s lazy table, ``_LAZY``.

An entry maps a public name to ``"module"`` (the name is that module's attribute), ``"module:attribute"``
(exported under another name) or ``"module:"`` (the name is a submodule, used as a namespace); a
``# comment`` line in the table opens a group of names. :func:`split_target` reads one entry's target
(:mod:`rlcore.api` imports with it), :func:`read_lazy_table` the whole table from a module's source text, with
the groups (:mod:`rlcore_testkit.surface` snapshots the names, :mod:`rlcore_testkit.hookdocs` lists them in
``docs/api.md``).

This module imports only the standard library: :mod:`rlcore.api` imports it at start-up.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_COMMENT = re.compile(r"\s*# (.+)")


class LazyName(NamedTuple):
    """One entry of a ``_LAZY`` table: its ``group`` (the ``# comment`` above it; empty before the first),
    the public ``name``, the ``module`` it lives in and its ``attribute`` there (None: the name is the module)."""

    group: str
    name: str
    module: str
    attribute: str | None


def split_target(name: str, target: str) -> tuple[str, str | None]:
    """Where public ``name`` with lazy ``target`` lives: ``(module, attribute)``, or ``(module, None)`` when
    the name is the module (``"module:"``)."""
    module, _, attribute = target.partition(":")
    if target.endswith(":"):
        return module, None
    return module, attribute or name


def read_lazy_table(source: str) -> list[LazyName]:
    """The entries of the ``_LAZY`` dict literal assigned at the top level of the module ``source``, in order,
    each with its group; empty when the module has no such table."""
    import ast

    table: ast.Dict | None = None
    for node in ast.parse(source).body:
        targets: list[ast.expr]
        if isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        elif isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        else:
            continue
        if isinstance(value, ast.Dict) and any(isinstance(t, ast.Name) and t.id == "_LAZY" for t in targets):
            table = value
    if table is None:
        return []
    lines = source.splitlines()
    groups: dict[int, str] = {}
    for number in range(table.lineno, (table.end_lineno or table.lineno) + 1):
        comment = _COMMENT.fullmatch(lines[number - 1])
        if comment:
            groups[number] = comment.group(1)
    entries: list[LazyName] = []
    for key, value in zip(table.keys, table.values, strict=True):
        if key is None:  # a ``**mapping`` entry: the table has none
            continue
        name, target = ast.literal_eval(key), ast.literal_eval(value)
        above = [line for line in groups if line < key.lineno]
        entries.append(LazyName(groups[max(above)] if above else "", name, *split_target(name, target)))
    return entries
