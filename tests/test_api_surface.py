"""The plugin API surface and its snapshot: the stored ``core/rlcore/api/surface.json`` matches the source and
``API_VERSION``, and a change of the surface without a big enough version bump is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rlcore_testkit.surface import PACKAGE, SNAPSHOT, SurfaceError, check_snapshot, main, write_snapshot

from rlcore.api import API_VERSION


def test_snapshot_matches_the_source() -> None:
    """Fails when a hookspec, the register callback, a kind or a public module's names or signatures changed
    without ``python -m rlcore_testkit.surface --write`` (which needs an API_VERSION bump)."""
    problem = check_snapshot()
    assert problem is None, problem
    assert main([]) == 0


@pytest.fixture
def package_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of rlcore's Python sources and of the snapshot, to change without touching the checkout."""
    package = tmp_path / "rlcore"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    snapshot = tmp_path / "surface.json"
    shutil.copy2(SNAPSHOT, snapshot)
    return package, snapshot


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) with ``new`` in ``path``."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_a_changed_hook_needs_a_minor_bump(package_copy: tuple[Path, Path]) -> None:
    """A hookspec gains an argument: the check names it, ``--write`` refuses the same version and accepts the
    next minor one, after which the snapshot matches again."""
    package, snapshot = package_copy
    edit(
        package / "hookspecs.py",
        "def on_run_end(run: RunContext, status: str)",
        "def on_run_end(run: RunContext, status: str, why: str)",
    )
    problem = check_snapshot(snapshot, API_VERSION, package)
    assert problem is not None and "~ hooks/on_run_end" in problem and "bump at least the minor version" in problem
    with pytest.raises(SurfaceError, match="bump at least the minor version"):
        write_snapshot(snapshot, API_VERSION, package)
    major, minor, _ = API_VERSION.split(".")
    bumped = f"{major}.{int(minor) + 1}.0"
    write_snapshot(snapshot, bumped, package)
    assert check_snapshot(snapshot, bumped, package) is None
    assert "belongs to" in (check_snapshot(snapshot, API_VERSION, package) or "")


def test_a_removed_name_needs_a_major_bump(package_copy: tuple[Path, Path]) -> None:
    """A public name leaves ``rlcore.api``: a minor bump is refused, a major one accepted."""
    package, snapshot = package_copy
    edit(package / "api" / "__init__.py", '    "parse_dtype": "rlcore.dtypes",\n', "")
    major, minor, _ = (int(part) for part in API_VERSION.split("."))
    with pytest.raises(SurfaceError, match=r"(?s)bump the major version.*- modules/rlcore.api/parse_dtype"):
        write_snapshot(snapshot, f"{major}.{minor + 1}.0", package)
    write_snapshot(snapshot, f"{major + 1}.0.0", package)
    assert check_snapshot(snapshot, f"{major + 1}.0.0", package) is None


def test_every_public_name_resolves_and_is_typed_the_same() -> None:
    """Each name of ``rlcore.api`` imports from its module; its classes, functions and modules have a docstring
    (a constant or a type alias is documented by its ``#:`` comment), and the ``TYPE_CHECKING`` block imports exactly the names of ``_LAZY``, from the same
    modules, so type checkers see what a plugin gets."""
    import ast
    import importlib
    import inspect

    import rlcore.api as api

    source = ast.parse(Path(api.__file__).read_text())
    typed: dict[str, str] = {}
    for node in ast.walk(source):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom) and item.module
                for alias in item.names:
                    try:
                        importlib.import_module(f"{item.module}.{alias.name}")
                        is_module = True
                    except ModuleNotFoundError:
                        is_module = False
                    target = f"{item.module}.{alias.name}:" if is_module else item.module
                    if alias.asname and not is_module:
                        target = f"{item.module}:{alias.name}"
                    typed[alias.asname or alias.name] = target
    assert typed == api._LAZY
    undocumented = []
    for name in api._LAZY:
        value = getattr(api, name)
        if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismodule(value):
            if not (getattr(value, "__doc__", None) or "").strip():
                undocumented.append(name)
    assert not undocumented, f"public names without a docstring: {undocumented}"


def test_one_reader_of_the_lazy_table() -> None:
    """The lazy-table reader gives every name of ``rlcore.api``, in the table's order, with the target that
    ``rlcore.api`` imports it from and the group ``docs/api.md`` lists it under."""
    from rlcore_testkit.hookdocs import api_groups

    import rlcore.api
    from rlcore.api.lazy_table import read_lazy_table

    entries = read_lazy_table((PACKAGE / "api" / "__init__.py").read_text())
    assert [entry.name for entry in entries] == list(rlcore.api._LAZY)
    assert all((entry.module, entry.attribute) == rlcore.api._target(entry.name) for entry in entries)
    assert entries[0].group == "errors" and entries[0].name == "RLCoreError"
    assert [name for _, names in api_groups() for name in names] == list(rlcore.api._LAZY)
    fragment = (
        '_LAZY: dict[str, str] = {\n    # a group\n    "A": "m",\n    "B": "m:b",\n    # more\n    "c": "m.c:",\n}\n'
    )
    assert [tuple(entry) for entry in read_lazy_table(fragment)] == [
        ("a group", "A", "m", "A"),
        ("a group", "B", "m", "b"),
        ("more", "c", "m.c", None),
    ]
