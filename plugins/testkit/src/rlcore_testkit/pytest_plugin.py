"""The ``rlcore`` pytest plugin (entry point ``pytest11``): fixtures for testing rlcore and its plugins.

Fixtures:

``plugin_manager``
    a freshly loaded :class:`rlcore.plugins.PluginManager` installed as the process-wide one for the
    duration of the test (the previous one is restored afterwards).
``registered``
    ``with registered(module_or_object, name="x"):`` registers a plugin object in the process-wide
    manager, rebuilds the registry, and removes it again on exit.
``tiny_model_dir``
    a session-wide directory with a tiny Qwen2 model and a locally trained tokenizer.
``tiny_tokenizer``
    that directory's tokenizer, loaded with ``AutoTokenizer``.
``warm_ray``
    (module) a local Ray shared by the modules of this test process that ask for it, with warm workers: runs attach
    to it and take over the worker processes of the last run (:mod:`rlcore_testkit.shared_ray`).
``no_shared_ray``
    (module) the shared Ray stopped, for a module that starts its own Ray or checks that a run starts one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from rlcore import load_plugins
from rlcore.api import PluginManager, make_plugin_manager, set_plugin_manager


@contextlib.contextmanager
def registered(plugin: Any, name: str = "test-plugin") -> Iterator[PluginManager]:
    """Register ``plugin`` (a module, class or instance with hookimpls) for the duration of the block."""
    manager = load_plugins()
    manager.add_plugin(plugin, name)
    try:
        yield manager
    finally:
        manager.remove_plugin(plugin, name)


@pytest.fixture
def plugin_manager() -> Iterator[PluginManager]:
    """A freshly loaded plugin manager, installed as the process-wide one for this test."""
    manager = make_plugin_manager()
    previous = set_plugin_manager(manager)
    try:
        yield manager
    finally:
        set_plugin_manager(previous)


@pytest.fixture(name="registered")
def registered_fixture(plugin_manager: PluginManager):
    """The :func:`registered` context manager, bound to a fresh plugin manager."""
    return registered


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory):
    """A tiny Qwen2 model + tokenizer written once per test session."""
    from rlcore_testkit.tiny import make_tiny_model_dir

    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    """The tiny model's tokenizer (left padding, ChatML template)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def shared_ray() -> Iterator[Any]:
    """The test process's :class:`~rlcore_testkit.shared_ray.SharedRay`, stopped at the end of the session."""
    from rlcore_testkit.shared_ray import SharedRay

    shared = SharedRay()
    yield shared
    shared.stop()


@pytest.fixture(scope="module")
def warm_ray(shared_ray: Any) -> None:
    """A running local Ray with ``rlcore.api.warm_ray_workers`` active, shared with the other modules that ask for
    it: the module's runs attach to it and reuse the worker processes earlier runs left idle. Skips without Ray."""
    pytest.importorskip("ray")
    shared_ray.start()


@pytest.fixture(scope="module")
def no_shared_ray(shared_ray: Any) -> None:
    """No Ray running when the module starts: the shared one is stopped (a module that starts its own Ray, or
    checks that a run starts and stops one)."""
    shared_ray.stop()
