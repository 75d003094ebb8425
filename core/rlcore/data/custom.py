"""User code named by the config: import a function or class from a .py file (the dataset class,
``data.custom_cls``, or the ``dataset`` registry; the reward function), and check that a file defines a name
without running it (the dry run)."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlcore.data import DataError
from rlcore.errors import RLCoreError
from rlcore.usercode import EXIT_EXCEPTIONS, describe_exit, is_stop_signal

if TYPE_CHECKING:
    from rlcore.config.sections.data import DataConfig
    from rlcore.registry import Registry


def load_from_file(
    path: str,
    name: str,
    *,
    what: str,
    error_cls: type[RLCoreError] = RLCoreError,
    path_key: str = "path",
    name_key: str = "name",
) -> Any:
    """Import the Python file ``path`` as a module and return its attribute ``name``.

    ``what`` names the config section in messages (for example ``"data.custom_cls"``), ``path_key`` and
    ``name_key`` its two keys (``data.sampler`` has ``class_path`` and ``class_name``). The module is
    registered in ``sys.modules`` under a name derived from the file's absolute path, so classes defined in
    it can be pickled by reference and importing the same file twice reuses the module. Errors (missing
    file, exception while importing, ``sys.exit()`` while importing, missing attribute) raise ``error_cls``
    naming the path and name.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise error_cls(f"{what}.{path_key}={path!r}: file does not exist")
    resolved = file.resolve()
    module_name = "rlcore_user_" + hashlib.sha1(str(resolved).encode()).hexdigest()[:12] + "_" + resolved.stem
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, resolved)
        if spec is None or spec.loader is None:
            raise error_cls(f"{what}.{path_key}={path!r}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except EXIT_EXCEPTIONS as exc:
            del sys.modules[module_name]
            if is_stop_signal(exc):
                raise
            raise error_cls(
                f"{what}.{path_key}={path!r}: importing the file tried to end the run: {describe_exit(exc)}; a "
                "file rlcore imports must not end the process"
            ) from None
        except Exception as exc:
            del sys.modules[module_name]
            raise error_cls(
                f"{what}.{path_key}={path!r}: importing the file raised {type(exc).__name__}: {exc}"
            ) from exc
    if not hasattr(module, name):
        public = sorted(n for n in vars(module) if not n.startswith("_"))
        raise error_cls(
            f"{what}.{path_key}={path!r} defines no {name!r} ({what}.{name_key}); it defines: {', '.join(public)}"
        )
    return getattr(module, name)


#: names whose use lets a module bind names that its source does not show
_DYNAMIC = {"globals", "exec", "__getattr__", "__dict__", "setattr"}


def module_level_names(tree: ast.Module) -> set[str] | None:
    """The names a module binds at its top level (definitions, assignments, imports, also inside ``if``/
    ``try``/``with``/``for`` blocks), or ``None`` when it may bind names its source does not show (a star
    import, ``globals()``, ``exec``, a module ``__getattr__``)."""
    words = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    words |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    words |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    if words & _DYNAMIC:
        return None
    return _bound_names(tree.body)


def _bound_names(statements: list[ast.stmt]) -> set[str] | None:
    names: set[str] = set()
    for node in statements:
        targets: list[ast.expr] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(alias.name == "*" for alias in node.names):
                return None
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        names.update(
            n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name)
        )
        handlers = [s for handler in getattr(node, "handlers", []) for s in handler.body]
        inner = [*getattr(node, "body", []), *getattr(node, "orelse", []), *getattr(node, "finalbody", []), *handlers]
        if inner:
            found = _bound_names([s for s in inner if isinstance(s, ast.stmt)])
            if found is None:
                return None
            names |= found
    return names


def check_defines(path: str, name: str, *, what: str, error_cls: type[RLCoreError] = RLCoreError) -> None:
    """Check, without running it, that the Python file ``path`` (key ``{what}.path``) exists, parses and
    defines ``name`` (key ``{what}.name``): the checks :func:`load_from_file` makes by importing it, with its
    messages."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise error_cls(f"{what}.path={path!r}: file does not exist")
    try:
        tree = ast.parse(file.read_bytes(), str(file))
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        raise error_cls(f"{what}.path={path!r} is not valid Python: {where}: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise error_cls(f"{what}.path={path!r} cannot be read: {exc}") from exc
    names = module_level_names(tree)
    if names is not None and name not in names:
        public = sorted(n for n in names if not n.startswith("_"))
        raise error_cls(f"{what}.path={path!r} defines no {name!r} ({what}.name); it defines: {', '.join(public)}")


def load_dataset_class(data: DataConfig, registry: Registry) -> type:
    """The dataset class a run uses.

    Args:
        data: the run's ``data`` section.
        registry: the run's :class:`rlcore.registry.Registry`, which ``data.dataset`` is resolved in.

    ``data.custom_cls.path`` (with ``data.custom_cls.name``) loads a class from a .py file; otherwise
    ``data.dataset`` is looked up as a ``dataset`` component (unknown names raise the registry's error
    listing the known datasets).
    """
    path = data.custom_cls.path
    if path:
        name = data.custom_cls.name
        if not name:
            raise DataError(f"data.custom_cls.path={path!r} is set but data.custom_cls.name is not")
        cls = load_from_file(path, name, what="data.custom_cls", error_cls=DataError)
        if not isinstance(cls, type):
            raise DataError(f"data.custom_cls: {name!r} in {path!r} is a {type(cls).__name__}, not a class")
        return cls
    return registry.load("dataset", data.dataset)
