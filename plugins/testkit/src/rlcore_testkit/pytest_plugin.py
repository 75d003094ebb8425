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

The shared Ray is stopped when a module that does not use ``warm_ray`` starts (``shared_ray_only_where_used``), so a
module that starts its own Ray, or checks that a run starts and stops one, finds none running.
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


#: the modules whose tests use ``warm_ray`` (their node ids), noted at collection
WARM_RAY_MODULES = pytest.StashKey[frozenset[str]]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Note the modules whose tests use ``warm_ray`` (directly or through another fixture)."""
    config.stash[WARM_RAY_MODULES] = frozenset(
        item.nodeid.split("::")[0] for item in items if "warm_ray" in getattr(item, "fixturenames", ())
    )


@pytest.fixture(scope="module", autouse=True)
def shared_ray_only_where_used(request: pytest.FixtureRequest, shared_ray: Any) -> None:
    """Stop the shared Ray when a module that does not use it starts: it may start a Ray of its own or check that
    a run does, and an idle Ray's daemons and workers only cost CPU and memory."""
    if request.node.nodeid not in request.config.stash.get(WARM_RAY_MODULES, frozenset()):
        shared_ray.stop()
