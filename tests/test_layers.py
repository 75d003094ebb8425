"""The core's floors, as ``docs/architecture.md`` draws them, hold: no module imports from a floor above its own.

The drawing (the code block of the "Layers" section) is the one list of floors; this test reads it, checks
that it names every top-level module and package of ``core/rlcore`` exactly once, and then checks every
run-time import in the core (imports under ``if TYPE_CHECKING:`` are for the type checker only) against it.
The few imports that still point up are listed in :data:`KNOWN_UPWARD_IMPORTS` with their reason; a new one
fails, and so does an entry that no longer exists (the list only shrinks).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "core" / "rlcore"
DOC = ROOT / "docs" / "architecture.md"

#: (importing module, imported module) -> why it is allowed for now
KNOWN_UPWARD_IMPORTS: dict[tuple[str, str], str] = {
    ("rlcore.config.validate", "rlcore.algos.pf_ppo"): "the dry run checks pf_ppo's settings with its own parser",
    ("rlcore.config.validate", "rlcore.algos.rollout_correction"): "the dry run checks rollout-correction settings",
    ("rlcore.config.validate", "rlcore.data.custom"): "the dry run loads data.custom_cls to check it exists",
    ("rlcore.config.validate", "rlcore.modelkit.activation_offload"): "the dry run's activation-offload note",
    ("rlcore.config.validate", "rlcore.tracking.sinks"): "the dry run's note on verl's file-logger variables",
}


def floors_of_the_drawing() -> dict[str, int]:
    """Top-level module or package name -> floor, read from the code block of the "Layers" section."""
    section = DOC.read_text().split("## Layers", 1)[1]
    block = section.split("```", 2)[1]
    floors: dict[str, int] = {}
    floor = -1
    for line in block.strip("\n").splitlines():
        number = re.match(r"^(\d) ", line)
        if number:
            floor = int(number.group(1))
        for name in line[17:].split(","):
            if name.strip():
                floors[name.strip()] = floor
    return floors


def top_level(module: str) -> str:
    """``rlcore.a.b`` -> ``a``; ``rlcore`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    """The dotted name of a core source file."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(tree: ast.Module) -> list[str]:
    """The ``rlcore`` modules a source imports at run time (anywhere but under ``if TYPE_CHECKING:``)."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for child in node.orelse:
                visit(child)
            return
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] == "rlcore"
        ):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name.split(".")[0] == "rlcore")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def core_sources() -> list[Path]:
    """Every Python source of the core."""
    return sorted(PACKAGE.rglob("*.py"))


def test_the_drawing_names_every_top_level_module_once() -> None:
    """Each top-level module and package of ``core/rlcore`` is on exactly one floor of the drawing."""
    on_disk = {top_level(module_name(path)) for path in core_sources()}
    section = DOC.read_text().split("## Layers", 1)[1].split("```", 2)[1]
    names = [name.strip() for line in section.strip("\n").splitlines() for name in line[17:].split(",") if name.strip()]
    assert sorted(set(names)) == sorted(names), "a name is on two floors"
    assert set(floors_of_the_drawing()) == on_disk


def test_no_module_imports_from_a_floor_above() -> None:
    """Every run-time import stays on its floor or goes down, but for the listed exceptions."""
    floors = floors_of_the_drawing()
    upward: set[tuple[str, str]] = set()
    for path in core_sources():
        importer = module_name(path)
        for imported in runtime_imports(ast.parse(path.read_text())):
            if floors[top_level(imported)] > floors[top_level(importer)]:
                upward.add((importer, imported))
    new = sorted(upward - set(KNOWN_UPWARD_IMPORTS))
    gone = sorted(set(KNOWN_UPWARD_IMPORTS) - upward)
    assert not new, f"imports from a floor above (see docs/architecture.md, Layers): {new}"
    assert not gone, f"these exceptions no longer exist; remove them from KNOWN_UPWARD_IMPORTS: {gone}"


def test_an_upward_import_is_found() -> None:
    """The walk sees function-level imports and skips type-only ones (so the check above can fail)."""
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rlcore.controller.trainer import Trainer\n"
        "def f():\n    from rlcore.workers.actor import ROLE_PARTS\n"
    )
    assert runtime_imports(tree) == ["rlcore.workers.actor"]
