"""Below the controller nothing resolves components through the process-wide plugin manager (issue 41 item 4).

``rlcore run`` loads the plugins once and resolves the run's components at the controller level
(:func:`rlcore.run.check_components`); what the trainer builds gets the run's registry handed down. A call of
``load_plugins()`` or ``get_component()`` anywhere else in the core is a hidden global lookup. The places
that still make one are listed in :data:`KNOWN_GLOBAL_LOOKUPS` with their reason; a new one fails, and so
does an entry that no longer exists (the list only shrinks).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "core" / "rlcore"

#: the machinery and the controller level, which load the plugins for everything below them (``rlcore.runkit``
#: is the controller level of a plugin command that trains with its own loop, such as ``rlcore sft``)
CONTROLLER_LEVEL = {"rlcore.plugins", "rlcore.cli", "rlcore.run", "rlcore.runkit"}

#: module -> why it still looks up through the process-wide plugin manager
KNOWN_GLOBAL_LOOKUPS: dict[str, str] = {
    "rlcore.workers.base": "a worker process resolves its training backend once, at its init",
    "rlcore.workers.actor": "an actor worker process resolves its rollout engine once, at its init",
    "rlcore.algos.losses": "an actor worker process resolves its policy loss once, at its init",
    "rlcore.config.loader": "the config loader merges the plugins' defaults (the config's own rework)",
    "rlcore.config.batch_sizes": "the batch arithmetic asks the backend for its data-parallel size (config rework)",
}

LOOKUPS = ("load_plugins", "get_component")


def global_lookups(tree: ast.Module) -> list[str]:
    """The names of the process-wide lookups a source calls (``load_plugins()``, ``get_component(...)``, also
    as an attribute: ``rlcore.plugins.load_plugins()``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in LOOKUPS:
                found.append(name)
    return found


def module_name(path: Path) -> str:
    """The dotted name of a core source file."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_global_lookups_below_the_controller() -> None:
    """Only the controller level and the listed modules call ``load_plugins()`` or ``get_component()``."""
    looking: set[str] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "templates" in path.relative_to(PACKAGE).parts:
            continue
        text = path.read_text()
        if any(name in text for name in LOOKUPS) and global_lookups(ast.parse(text)):
            looking.add(module_name(path))
    looking -= CONTROLLER_LEVEL
    new = sorted(looking - set(KNOWN_GLOBAL_LOOKUPS))
    gone = sorted(set(KNOWN_GLOBAL_LOOKUPS) - looking)
    assert not new, f"process-wide component lookups below the controller (pass the run's registry down): {new}"
    assert not gone, f"these lookups no longer exist; remove them from KNOWN_GLOBAL_LOOKUPS: {gone}"


def test_a_global_lookup_is_found() -> None:
    """The walk sees a bare call, an attribute call and one inside a method (so the check above can fail)."""
    tree = ast.parse(
        "from rlcore import plugins\n"
        "def f():\n    return plugins.load_plugins().registry\n"
        "class A:\n    def g(self):\n        return get_component('tracker', 'jsonl')\n"
        "registry.get('tracker', 'jsonl')\n"
    )
    assert sorted(global_lookups(tree)) == ["get_component", "load_plugins"]
