"""``trainer.checkpoint_callback_class`` (verl's key, its ``CheckpointCallback``): a user class whose
``on_save(path, step)`` the controller calls after every checkpoint is published.

The key names the class as verl does, by its dotted path (``my_pkg.callbacks.Upload``), or as a file and a name
(``path/to/callbacks.py:Upload``). The class is built once, with no arguments, before training starts; its
``on_save`` receives the published ``global_step_N`` folder (a string) and the step, positionally, once the
folder is complete on disk (renamed into place, ``latest_checkpointed_iteration.txt`` written). It runs in the
controller as other user code does (:func:`rlcore.usercode.user_call`): an exception, or an exit, is an error
naming the key; the checkpoint it was called for stays. The dry run checks, without running anything, that
the module can be found (or the file defines the class).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from typing import Any

from rlcore.config.problems import ConfigError
from rlcore.data.custom import load_from_file, module_level_names
from rlcore.errors import RLCoreError
from rlcore.usercode import EXIT_EXCEPTIONS, exit_error, is_stop_signal, user_call

KEY = "trainer.checkpoint_callback_class"


def split_class_path(spec: str) -> tuple[str | None, str, str]:
    """``(file, module, name)`` of the key's value: a ``file.py:Name`` gives the file, a dotted path the module."""
    head, sep, name = spec.rpartition(":")
    if sep and head.endswith(".py"):
        return head, "", name
    module, dot, name = spec.replace(":", ".").rpartition(".")
    if not dot or not module or not name:
        raise RLCoreError(
            f"{KEY}={spec!r} is not a class path: give package.module.ClassName or path/to/file.py:ClassName"
        )
    return None, module, name


def checkpoint_callback_problems(spec: str | None) -> list[str]:
    """The dry run's check of the key, without running user code: the file exists, parses and defines the
    class, or the dotted path's module can be found."""
    if not spec:
        return []
    try:
        file, module, name = split_class_path(spec)
    except RLCoreError as exc:
        return [str(exc)]
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            return [f"{KEY}={spec!r}: file {file!r} does not exist"]
        try:
            names = module_level_names(ast.parse(path.read_bytes(), str(path)))
        except SyntaxError as exc:
            return [f"{KEY}={spec!r}: {file!r} is not valid Python: line {exc.lineno}: {exc.msg}"]
        if names is not None and name not in names:
            return [f"{KEY}={spec!r}: {file!r} defines no {name!r}"]
        return []
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package that does not exist
        found = None
    if found is None:
        return [f"{KEY}={spec!r}: no module named {module!r} (is its package installed or on PYTHONPATH?)"]
    return []


def check_checkpoint_callback(spec: str | None) -> None:
    """Raise the problems of :func:`checkpoint_callback_problems` (the dry run records them)."""
    problems = checkpoint_callback_problems(spec)
    if problems:
        raise ConfigError(*problems)


def _resolve(spec: str) -> Any:
    """The object the key names (the module imported or the file run)."""
    file, module, name = split_class_path(spec)
    if file is not None:
        return load_from_file(
            file, name, what="trainer", path_key="checkpoint_callback_class", name_key="checkpoint_callback_class"
        )
    try:
        loaded = importlib.import_module(module)
    except EXIT_EXCEPTIONS as exc:
        if is_stop_signal(exc):
            raise
        raise exit_error(exc, f"{KEY}={spec!r} (importing {module!r})") from None
    except Exception as exc:
        raise RLCoreError(f"{KEY}={spec!r}: importing {module!r} raised {type(exc).__name__}: {exc}") from exc
    if not hasattr(loaded, name):
        raise RLCoreError(f"{KEY}={spec!r}: module {module!r} defines no {name!r}")
    return getattr(loaded, name)


class CheckpointCallback:
    """The loaded callback: :meth:`on_save` calls the user's ``on_save`` after a checkpoint is published."""

    def __init__(self, spec: str) -> None:
        """Load and build the class ``spec`` names; errors (no such class, not a class, no ``on_save`` method,
        a constructor that raises) name the key."""
        self.spec = spec
        cls = _resolve(spec)
        if not isinstance(cls, type):
            raise RLCoreError(f"{KEY}={spec!r} is a {type(cls).__name__}, not a class")
        if not callable(getattr(cls, "on_save", None)):
            raise RLCoreError(f"{KEY}={spec!r}: class {cls.__name__} has no on_save(path, step) method")
        self.instance = self._call(f"{cls.__name__}()", cls)

    def _call(self, what: str, function: Any, *args: Any) -> Any:
        """``function(*args)`` as user code: exits and exceptions become an error naming the key."""
        label = f"{KEY} ({self.spec}): {what}"
        try:
            with user_call(label):
                return function(*args)
        except RLCoreError:
            raise
        except Exception as exc:
            raise RLCoreError(f"{label} raised {type(exc).__name__}: {exc}") from exc

    def on_save(self, path: Path, step: int) -> None:
        """Tell the user's callback that the checkpoint of ``step`` is published at ``path``."""
        self._call(f"on_save({str(path)!r}, {step})", self.instance.on_save, str(path), step)


def load_checkpoint_callback(spec: str | None) -> CheckpointCallback | None:
    """The run's checkpoint callback (None when ``trainer.checkpoint_callback_class`` is not set)."""
    return CheckpointCallback(spec) if spec else None
