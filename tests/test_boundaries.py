"""Module boundaries: plugins import only rlcore's declared public API, no plugin reaches into another,
and the core has no import cycles (function-level imports included)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from rlcore.public_api import is_public

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"
#: the plugin template (package data of rlcore-plugin-scaffold): Jinja-templated sources, checked as the template
TEMPLATE_SRC = ROOT / "plugins" / "scaffold" / "src" / "rlcore_plugin_scaffold" / "templates" / "plugin"


def python_source(path: Path) -> str:
    """The file's text; in a template file, Jinja tag lines are dropped and ``{{ ... }}`` become ``x``."""
    text = path.read_text()
    if TEMPLATE_SRC not in path.parents:
        return text
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("{%")]
    return re.sub(r"\{\{[^}]*\}\}", "x", "\n".join(lines))


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every absolute import in ``path``, at any depth (``from a import b`` yields
    ``a.b`` when ``a.b`` is a module of the core, else ``a``)."""
    for node in ast.walk(ast.parse(python_source(path), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                yield node.lineno, candidate if core_module_path(candidate) else node.module


def core_module_path(module: str) -> Path | None:
    """The file of core module ``module``, if it is one."""
    base = CORE.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def plugin_sources() -> Iterator[tuple[str, Path]]:
    """``(package, file)`` for every source file of the bundled plugins and of the plugin template (whose files
    count as the generated package's, not as rlcore_plugin_scaffold's)."""
    for src in sorted(ROOT.glob("plugins/*/src")):
        for package in sorted(p for p in src.iterdir() if p.is_dir() and not p.name.endswith(".egg-info")):
            for path in sorted(package.rglob("*.py")):
                if TEMPLATE_SRC not in path.parents:
                    yield package.name, path
    for path in sorted(TEMPLATE_SRC.glob("*/src/*/*.py")):
        yield "rlcore_plugin_{{cookiecutter.underscored}}", path


#: the test kit (``rlcore_testkit``), imported from a plugin's source by the tasks plugin only, inside the
#: functions that build its models (``python -m rlcore_plugin_tasks.build_base``, its ``[build]`` extra)
TEST_KIT = "rlcore_testkit"
TEST_KIT_USERS = {"rlcore_plugin_tasks"}


def test_plugins_import_only_the_public_api() -> None:
    """Every ``rlcore`` import of a plugin, of the test kit and of the template is a module of
    ``rlcore.public_api``: ``rlcore`` or ``rlcore.api``."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for _, path in plugin_sources()
        for line, module in imported_modules(path)
        if (module == "rlcore" or module.startswith("rlcore.")) and not is_public(module)
    ]
    assert not offenders, "plugins import non-public rlcore modules:\n" + "\n".join(offenders)


def test_plugins_do_not_import_each_other() -> None:
    """A plugin imports only its own package among the rlcore_plugin_* packages (the test kit, no plugin,
    depends on ``rlcore[train]`` and runs the default rollout engine in its agent-loop contract)."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for package, path in plugin_sources()
        for line, module in imported_modules(path)
        if module.startswith("rlcore_plugin_") and module.split(".")[0] != package and package != TEST_KIT
    ]
    assert not offenders, "plugins import other plugins' modules:\n" + "\n".join(offenders)


def function_level_lines(path: Path) -> set[int]:
    """The lines of the imports in ``path`` that sit inside a function body."""
    tree = ast.parse(python_source(path), filename=str(path))
    return {
        node.lineno
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }


def test_plugin_sources_import_the_test_kit_only_to_build_models() -> None:
    """No plugin's source (nor the template's) imports the test kit, except the plugins of
    :data:`TEST_KIT_USERS`, and those only inside functions: a run never needs ``rlcore-testkit``."""
    offenders = []
    for package, path in plugin_sources():
        if package == TEST_KIT:
            continue
        inside = function_level_lines(path)
        offenders += [
            f"{path.relative_to(ROOT)}:{line}: {module}"
            for line, module in imported_modules(path)
            if module.split(".")[0] == TEST_KIT and (package not in TEST_KIT_USERS or line not in inside)
        ]
    assert not offenders, "plugin sources import the test kit:\n" + "\n".join(offenders)


def test_the_core_does_not_import_the_test_kit() -> None:
    """No core module imports ``rlcore_testkit`` (the plugin template's generated tests do, as a plugin's do)."""
    found = [
        f"{path.relative_to(CORE)}:{line}: {module}"
        for path in sorted((CORE / "rlcore").rglob("*.py"))
        if TEMPLATE_SRC not in path.parents
        for line, module in imported_modules(path)
        if module.split(".")[0] == TEST_KIT
    ]
    assert not found, "\n".join(found)


def core_import_graph() -> dict[str, set[str]]:
    """Module -> the core modules it imports (function-level imports included; templates excluded)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((CORE / "rlcore").rglob("*.py")):
        if TEMPLATE_SRC in path.parents:
            continue
        parts = path.relative_to(CORE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        targets = set()
        for _, module in imported_modules(path):
            while module.startswith("rlcore") and not core_module_path(module):
                module = module.rpartition(".")[0]
            if module.startswith("rlcore") and module != name:
                targets.add(module)
        graph[name] = targets
    return graph


def test_the_core_has_no_import_cycles() -> None:
    """No chain of imports leads from a core module back to itself."""
    graph = core_import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_config_layer_imports_no_workers_or_controller() -> None:
    """``rlcore.config`` (the key tree, the typed sections, the batch arithmetic) sits below the workers and the
    controller: none of its modules imports them, at any depth."""
    found = [
        f"{path.relative_to(CORE)}:{line} imports {module}"
        for path in sorted((CORE / "rlcore" / "config").rglob("*.py"))
        for line, module in imported_modules(path)
        if module.split(".")[:2] in (["rlcore", "workers"], ["rlcore", "controller"])
    ]
    assert not found, "\n".join(found)
