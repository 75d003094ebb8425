"""The plugin API's surface, read from the source, and its snapshot ``core/rlcore/api/surface.json``.

The surface is what a plugin may rely on (``docs/publishing.md``, "Versioning"): the component kinds and
their hooks, every hookspec's signature, the ``register`` callback's signature, the list
:data:`rlcore.public_api.PUBLIC_MODULES`, and in each public module every public name with its signature
(functions), its bases, methods and annotated attributes (classes, Protocols and dataclasses). It is read with
:mod:`ast`, so nothing is imported (no torch) and a default value or a docstring is not part of it.

The snapshot stores the surface with the :data:`rlcore.api.API_VERSION` it belongs to; ``tests/test_api_surface.py``
fails when the two differ. ``python -m rlcore_testkit.surface`` says what changed; ``python -m rlcore_testkit.surface
--write`` rewrites the snapshot, and refuses unless ``API_VERSION`` was bumped enough for the change: a major
bump when anything was removed, at least a minor bump when anything was added or changed.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rlcore
from rlcore.api import API_VERSION, COMPONENT_KINDS, PUBLIC_MODULES, RLCoreError, read_lazy_table

#: the directory of the ``rlcore`` package
PACKAGE = Path(rlcore.__file__).resolve().parent
#: the stored snapshot
SNAPSHOT = PACKAGE / "api" / "surface.json"
#: how a snapshot is rewritten
WRITE_COMMAND = "python -m rlcore_testkit.surface --write"


class SurfaceError(RLCoreError):
    """The API surface and its snapshot disagree in a way the command cannot fix on its own."""


@dataclass(frozen=True)
class SurfaceDiff:
    """Flattened keys (``section/module/name/member``) removed, added or changed between two surfaces."""

    removed: tuple[str, ...]
    added: tuple[str, ...]
    changed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.removed or self.added or self.changed)

    def summary(self, limit: int = 20) -> str:
        """One line per difference (``- removed``, ``+ added``, ``~ changed``), at most ``limit`` lines."""
        lines = [f"- {k}" for k in self.removed] + [f"+ {k}" for k in self.added] + [f"~ {k}" for k in self.changed]
        more = [f"... and {len(lines) - limit} more"] if len(lines) > limit else []
        return "\n".join(lines[:limit] + more)


def module_file(module: str, package: Path = PACKAGE) -> Path | None:
    """The source file of ``rlcore`` module ``module`` (``rlcore.a.b`` -> ``a/b.py`` or ``a/b/__init__.py``)."""
    base = package.joinpath(*module.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def public_module_names(package: Path = PACKAGE) -> list[str]:
    """Every module :data:`PUBLIC_MODULES` makes public, its ``.*`` packages expanded to all their modules."""
    names: list[str] = []
    for entry in PUBLIC_MODULES:
        if not entry.endswith(".*"):
            names.append(entry)
            continue
        root = entry[:-2]
        directory = package.joinpath(*root.split(".")[1:])
        for path in sorted(directory.rglob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            names.append(".".join((root, *parts)))
    return names


def function_signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``[async ]def name(args) -> returns`` with the arguments' annotations but without default values."""
    args = node.args
    params = []
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    for index, arg in enumerate(positional):
        params.append(_arg(arg) + ("=..." if index >= first_default else ""))
        if args.posonlyargs and index == len(args.posonlyargs) - 1:
            params.append("/")
    if args.vararg is not None:
        params.append("*" + _arg(args.vararg))
    elif args.kwonlyargs:
        params.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        params.append(_arg(arg) + ("=..." if default is not None else ""))
    if args.kwarg is not None:
        params.append("**" + _arg(args.kwarg))
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    prefix = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return f"{prefix} {node.name}({', '.join(params)}){returns}"


def _arg(arg: ast.arg) -> str:
    return f"{arg.arg}: {ast.unparse(arg.annotation)}" if arg.annotation is not None else arg.arg


def class_surface(node: ast.ClassDef) -> dict[str, str]:
    """A class: its decorators and bases, public (and ``__init__``/``__call__``) methods and annotated attributes."""
    bases = ", ".join(ast.unparse(base) for base in (*node.bases, *node.keywords))
    decorators = "".join(f"@{ast.unparse(d)} " for d in node.decorator_list)
    members = {"": f"{decorators}class {node.name}({bases})"}
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _is_public(item.name, dunders=True):
            decorators = "".join(f"@{ast.unparse(d)} " for d in item.decorator_list)
            members[item.name] = decorators + function_signature(item)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and _is_public(item.target.id):
            members[item.target.id] = f"{item.target.id}: {ast.unparse(item.annotation)}"
    return members


def _is_public(name: str, dunders: bool = False) -> bool:
    return not name.startswith("_") or (dunders and name in ("__init__", "__call__"))


def module_surface(
    module: str, package: Path = PACKAGE, depth: int = 0, built: dict[tuple[str, int], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The public names of ``module`` with their surfaces; a name re-exported from another rlcore module is
    resolved there (so is a name of a lazy ``_LAZY = {name: module}`` table). Without ``__all__``, a module's
    public names are those it defines (a package's ``__init__`` also exports what it imports). ``built``: the
    surfaces this walk over ``package`` already built, by module and depth (each module is read once per depth;
    without it, once per name resolved there)."""
    built = {} if built is None else built
    if (module, depth) in built:
        return built[module, depth]
    path = module_file(module, package)
    if path is None:
        raise SurfaceError(f"public module {module} has no source file under {package}")
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    defined: dict[str, Any] = {}
    imported: dict[str, tuple[str, str]] = {}
    exported: list[str] | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            defined[node.name] = function_signature(node)
        elif isinstance(node, ast.ClassDef):
            defined[node.name] = class_surface(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "_LAZY":
            imported.update(_lazy_imports(text))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined[node.target.id] = f"{node.target.id}: {ast.unparse(node.annotation)}"
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    exported = _all_names(node.value, imported)
                elif isinstance(target, ast.Name) and target.id == "_LAZY":
                    imported.update(_lazy_imports(text))
                elif isinstance(target, ast.Name):
                    defined[target.id] = target.id
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, path, node)
            for alias in node.names:
                imported[alias.asname or alias.name] = (source, alias.name)
    if exported is None:
        exported = [name for name in defined if _is_public(name)]
        if path.name == "__init__.py":
            exported += [name for name in imported if _is_public(name) and name not in defined]
    surface: dict[str, Any] = {}
    for name in sorted(set(exported)):
        if name in defined:
            surface[name] = defined[name]
        elif name in imported:
            source, original = imported[name]
            surface[name] = _resolve(source, original, package, depth, built)
        else:
            surface[name] = f"{name} (in __all__, not found)"
    built[module, depth] = surface
    return surface


def _lazy_imports(source: str) -> dict[str, tuple[str, str]]:
    """The lazy ``_LAZY`` table of the module ``source`` (:func:`rlcore.api.lazy_table.read_lazy_table`) as
    ``{name: (module, attribute)}``; a submodule is an attribute of its package."""
    table: dict[str, tuple[str, str]] = {}
    for entry in read_lazy_table(source):
        module, attribute = entry.module, entry.attribute
        if attribute is None:
            module, _, attribute = module.rpartition(".")
        table[entry.name] = (module, attribute)
    return table


def _all_names(node: ast.expr, lazy: dict[str, tuple[str, str]]) -> list[str]:
    """The names of an ``__all__`` list: literal strings, and ``*_LAZY`` for every name of the lazy table."""
    names: list[str] = []
    for item in node.elts if isinstance(node, ast.List | ast.Tuple) else ():
        if isinstance(item, ast.Starred) and isinstance(item.value, ast.Name) and item.value.id == "_LAZY":
            names += list(lazy)
        else:
            names.append(ast.literal_eval(item))
    return names


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module name of a (possibly relative) ``from ... import``."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if path.name == "__init__.py" else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _resolve(source: str, name: str, package: Path, depth: int, built: dict[tuple[str, int], dict[str, Any]]) -> Any:
    """The surface of ``name`` imported from ``source``: looked up there when it is an rlcore module."""
    if not source.startswith("rlcore") or depth > 5:
        return f"from {source} import {name}"
    if module_file(f"{source}.{name}", package) is not None:
        return f"module {source}.{name}"
    if module_file(source, package) is None:
        return f"from {source} import {name}"
    return module_surface(source, package, depth + 1, built).get(name, f"from {source} import {name}")


def hookspec_surface(package: Path = PACKAGE) -> dict[str, str]:
    """Every ``@hookspec`` function of ``rlcore.hookspecs`` with its signature."""
    tree = ast.parse((package / "hookspecs.py").read_text(encoding="utf-8"))
    return {
        node.name: function_signature(node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any(ast.unparse(d) == "hookspec" for d in node.decorator_list)
    }


def register_surface(package: Path = PACKAGE) -> str:
    """The signature of the ``register`` callback a registration hook receives (``Registry.make_register``)."""
    tree = ast.parse((package / "registry.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "make_register":
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef) and inner.name == "register":
                    return function_signature(inner)
    raise SurfaceError("rlcore.registry.Registry.make_register defines no register callback")


def current_surface(package: Path = PACKAGE) -> dict[str, Any]:
    """The plugin API's surface as it is in the source under ``package``."""
    built: dict[tuple[str, int], dict[str, Any]] = {}
    return {
        "kinds": {spec.name: spec.hook for spec in COMPONENT_KINDS},
        "hooks": hookspec_surface(package),
        "register": register_surface(package),
        "public_modules": list(PUBLIC_MODULES),
        "modules": {module: module_surface(module, package, 0, built) for module in public_module_names(package)},
    }


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a/b/c": leaf}`` for a nested dict; lists are leaves."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        flat.update(flatten(value, f"{prefix}/{key}" if prefix else key))
    return flat


def diff(old: dict[str, Any], new: dict[str, Any]) -> SurfaceDiff:
    """What changed from surface ``old`` to surface ``new``."""
    before, after = flatten(old), flatten(new)
    return SurfaceDiff(
        removed=tuple(sorted(set(before) - set(after))),
        added=tuple(sorted(set(after) - set(before))),
        changed=tuple(sorted(k for k in set(before) & set(after) if before[k] != after[k])),
    )


def _release(version: str) -> tuple[int, int, int]:
    major, minor, patch = (int(part) for part in version.split(".")[:3])
    return major, minor, patch


def bump_problem(stored_version: str, new_version: str, change: SurfaceDiff) -> str | None:
    """Why ``new_version`` is not a big enough bump from ``stored_version`` for ``change`` (None: it is).

    A removal needs a major bump; an addition or a change needs at least a minor one. (Whether a changed
    signature breaks plugins, for example a new required argument, is for the author to judge: make it major
    then.)
    """
    if not change:
        return None
    old, new = _release(stored_version), _release(new_version)
    if change.removed and new[0] <= old[0]:
        return f"names were removed, which breaks plugins: bump the major version (API_VERSION {new_version})"
    if new[:2] <= old[:2]:
        return f"the API changed: bump at least the minor version of API_VERSION (now {new_version})"
    return None


def load_snapshot(path: Path = SNAPSHOT) -> dict[str, Any]:
    """The stored snapshot ``{"api_version": ..., "surface": ...}``; a missing or unreadable file is an error."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SurfaceError(f"{path}: cannot read the API snapshot ({exc}); run {WRITE_COMMAND}") from exc


def write_snapshot(path: Path = SNAPSHOT, version: str = API_VERSION, package: Path = PACKAGE) -> SurfaceDiff:
    """Store the current surface with ``version`` in ``path``; refuses when the surface changed and ``version``
    is not bumped enough (:func:`bump_problem`). Returns the difference from the previous snapshot."""
    surface = current_surface(package)
    previous: dict[str, Any] = load_snapshot(path) if path.exists() else {"api_version": "0.0.0", "surface": {}}
    change = diff(previous["surface"], surface)
    problem = bump_problem(previous["api_version"], version, change)
    if problem is not None:
        raise SurfaceError(f"{problem}; rlcore/api/__init__.py holds it. What changed:\n{change.summary()}")
    path.write_text(json.dumps({"api_version": version, "surface": surface}, indent=1, sort_keys=True) + "\n")
    return change


def check_snapshot(path: Path = SNAPSHOT, version: str = API_VERSION, package: Path = PACKAGE) -> str | None:
    """What is wrong with the stored snapshot (None: it matches the source and ``version``)."""
    stored = load_snapshot(path)
    change = diff(stored["surface"], current_surface(package))
    if not change and stored["api_version"] == version:
        return None
    if not change:
        return f"API_VERSION is {version} but {path.name} belongs to {stored['api_version']}: run {WRITE_COMMAND}"
    problem = bump_problem(stored["api_version"], version, change)
    todo = f"{problem}, then run {WRITE_COMMAND}" if problem else f"run {WRITE_COMMAND}"
    return f"the plugin API surface changed since {path.name} ({stored['api_version']}): {todo}\n{change.summary()}"


def main(argv: list[str] | None = None) -> int:
    """Check the snapshot (exit 1 with what changed) or, with ``--write``, rewrite it."""
    parser = argparse.ArgumentParser(prog="python -m rlcore_testkit.surface", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the snapshot (needs an API_VERSION bump)")
    args = parser.parse_args(argv)
    try:
        if args.write:
            change = write_snapshot()
            print(f"{SNAPSHOT}: {'updated' if change else 'up to date'} (API {API_VERSION})")
            return 0
        problem = check_snapshot()
    except SurfaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print(f"{SNAPSHOT}: matches the source (API {API_VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
