"""The component kinds are listed once, in :data:`rlcore.api.kinds.COMPONENT_KINDS`; every other place that
lists them either derives from that table or is checked against it here, so a kind added in one place only
fails a test."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path
from typing import get_args, get_overloads

from rlcore_plugin_scaffold.scaffold import PLUGIN_TEMPLATE, template_variables
from rlcore_testkit import hookdocs

from rlcore import distributions, hookspecs
from rlcore.api import specs
from rlcore.api.kinds import COMPONENT_KINDS, KINDS
from rlcore.registry import KIND_HOOKS, ComponentLoader, Registry

ROOT = Path(__file__).resolve().parents[1]
#: a row of the kinds table of docs/architecture.md: | `kind` | selected by | protocol | spec | target |
TABLE_ROW = re.compile(
    r"^\| `(?P<kind>[a-z_]+)` \| (?P<selected_by>[^|]+) \| `(?P<protocol>[\w.]+)` \| (?P<spec>`\w+`|—) \|"
)


def section(page: Path, heading: str) -> str:
    """The text of ``page`` from the line ``heading`` to the next heading of the same or a higher level."""
    text = page.read_text()
    start = text.index(heading + "\n")
    level = heading.split(" ")[0]
    rest = text[start + len(heading) :]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)]
    return rest[: ends[0]] if ends else rest


def test_table_is_consistent() -> None:
    """Names and hooks are unique, and each hook is ``register_`` plus a plural of its kind."""
    assert len(set(KINDS)) == len(KINDS) == len(COMPONENT_KINDS)
    assert len({spec.hook for spec in COMPONENT_KINDS}) == len(COMPONENT_KINDS)
    for spec in COMPONENT_KINDS:
        assert spec.hook.startswith("register_" + spec.name.rsplit("_", 1)[0]), spec


def test_registry_derives_from_the_table() -> None:
    """The registry's kind -> hook map is the table, in the table's order."""
    assert list(KIND_HOOKS.items()) == [(spec.name, spec.hook) for spec in COMPONENT_KINDS]


def test_hookspecs_have_one_registration_hook_per_kind() -> None:
    """Every ``register_*`` hookspec but ``register_commands`` is a kind's hook, and says which kind it
    registers as ``(kind ``name``)``."""
    registration = {name for name in hookdocs.hook_names() if name.startswith("register_")} - {"register_commands"}
    assert registration == {spec.hook for spec in COMPONENT_KINDS}
    for spec in COMPONENT_KINDS:
        doc = inspect.getdoc(getattr(hookspecs, spec.hook)) or ""
        assert f"(kind ``{spec.name}``)" in doc.split("\n\n")[0], f"{spec.hook}'s docstring does not name its kind"


def test_template_has_one_switch_and_prompt_per_kind() -> None:
    """The plugin template's ``cookiecutter.json``: a yes/no switch, a prompt and an entry of ``_kinds`` (the
    list its post-generation hook walks) for every kind, and for nothing else."""
    context = json.loads((PLUGIN_TEMPLATE / "cookiecutter.json").read_text())
    switches = {key for key, value in template_variables().items() if isinstance(value, bool)}
    assert sorted(context["_kinds"]) == sorted(KINDS)
    assert switches == set(KINDS)
    assert set(KINDS) <= set(context["__prompts__"])


def test_distributions_name_known_kinds_only() -> None:
    """Every row of the distribution table names kinds of the table (a new row with a typo cannot load)."""
    assert {kind for row in distributions.DISTRIBUTIONS for kind in row.components} <= set(KINDS)


def test_architecture_page_has_one_row_per_kind() -> None:
    """docs/architecture.md's kinds table: one row per kind in the table's order, each "selected by" cell the
    kind's :attr:`~rlcore.api.kinds.KindSpec.selected_by` (without the Markdown backticks)."""
    text = section(ROOT / "docs" / "architecture.md", "## Component kinds and their call signatures")
    rows = [m for m in map(TABLE_ROW.match, text.splitlines()) if m]
    assert [(m["kind"], m["selected_by"].replace("`", "").strip()) for m in rows] == [
        (spec.name, spec.selected_by) for spec in COMPONENT_KINDS
    ]


def test_every_kind_has_a_protocol_and_at_most_one_spec_class() -> None:
    """Each kind's protocol is a ``typing.Protocol`` of the contract package (``rlcore.api``); each spec class is
    a frozen dataclass of :mod:`rlcore.api.specs` whose fields all have defaults (a spec built with no
    arguments is the kind's default), used by one kind only."""
    for kind in COMPONENT_KINDS:
        assert getattr(kind.protocol, "_is_protocol", False), f"{kind.name}: {kind.protocol!r} is not a Protocol"
        assert kind.protocol.__module__.startswith("rlcore.api."), kind
        if kind.spec is not None:
            assert dataclasses.is_dataclass(kind.spec) and kind.spec.__dataclass_params__.frozen, kind
            assert kind.spec.__module__ == "rlcore.api.specs", kind
            assert kind.spec() == kind.spec(), kind
    spec_classes = [kind.spec for kind in COMPONENT_KINDS if kind.spec is not None]
    assert len(set(spec_classes)) == len(spec_classes)
    assert set(spec_classes) == set(get_args(specs.CapabilitySpec))


def _overload_kinds(function) -> list[str]:
    """The ``Literal`` kinds of the overloads of ``function`` (its annotations are strings here)."""
    found = []
    for overload in get_overloads(function):
        match = re.fullmatch(r"Literal\['(\w+)'\]", overload.__annotations__["kind"])
        if match:
            found.append(match[1])
    return found


def test_the_typed_registry_covers_every_kind() -> None:
    """``Registry.load`` / ``get_component`` have an overload for every kind, ``Registry.spec`` and
    ``Registry.get`` one for every kind with a spec class, so that no kind falls back to ``Any``."""
    assert sorted(_overload_kinds(ComponentLoader.__call__)) == sorted(KINDS)
    with_specs = sorted(kind.name for kind in COMPONENT_KINDS if kind.spec is not None)
    assert sorted(_overload_kinds(Registry.spec)) == with_specs
    assert sorted(_overload_kinds(Registry.get)) == with_specs


def test_architecture_page_names_each_kind_protocol_and_spec() -> None:
    """The protocol and spec columns of docs/architecture.md's kinds table are the table's (a protocol by its
    dotted path, a spec class by its name, "—" for a kind without capabilities)."""
    text = section(ROOT / "docs" / "architecture.md", "## Component kinds and their call signatures")
    rows = [m for m in map(TABLE_ROW.match, text.splitlines()) if m]
    assert [(m["kind"], m["protocol"], m["spec"]) for m in rows] == [
        (
            kind.name,
            f"{kind.protocol.__module__}.{kind.protocol.__qualname__}",
            f"`{kind.spec.__name__}`" if kind.spec else "—",
        )
        for kind in COMPONENT_KINDS
    ]


def test_publishing_page_lists_every_kind_switch() -> None:
    """docs/publishing.md's template-variable table names one yes/no switch per kind."""
    (row,) = [
        line for line in (ROOT / "docs" / "publishing.md").read_text().splitlines() if "one per component kind" in line
    ]
    assert sorted(re.findall(r"`([a-z_]+)`", row.split("|")[1])) == sorted(KINDS)
