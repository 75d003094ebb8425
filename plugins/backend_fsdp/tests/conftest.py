"""Fixtures for the FSDP backend tests: configs and workers around the session's tiny model."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rlcore_testkit.contracts.backend import TrainingBackendContract


class FSDPSettings(TrainingBackendContract):
    """The contract's small run settings for the ``fsdp`` backend (not collected: no ``Test`` prefix)."""

    component_name = "fsdp"


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Run the backend's tests with one intra-op thread: the tiny model gains nothing from more, and on a
    shared machine idle OpenMP threads spinning for work cost far more CPU than the matrix products."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def policy_model_dir(request: pytest.FixtureRequest, tiny_model_dir: Path, tmp_path_factory: Any) -> Path:
    """The policy the workers train: the session's tiny dense model or, parametrized indirectly with a family
    of :data:`rlcore_testkit.tiny.MOE_FAMILIES`, a tiny mixture of experts with the same tokenizer."""
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    family = getattr(request, "param", None)
    if family is None:
        return tiny_model_dir
    return make_tiny_moe_model_dir(tmp_path_factory.mktemp(family), family=family)


@pytest.fixture
def make_config(policy_model_dir: Path) -> Callable[..., Any]:
    """``make_config(**dotted_overrides)``: the contract's small config for the tiny model."""

    def factory(**overrides: Any) -> Any:
        """The config with ``overrides`` (dotted keys, or ``__`` for the dots)."""
        dotted = {key.replace("__", "."): value for key, value in overrides.items()}
        return FSDPSettings.make_config(policy_model_dir, **dotted)

    return factory


@pytest.fixture
def make_worker(make_config: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``make_worker(role, init=True, **overrides)``: an actor (or, for role ``critic``, a critic) worker.

    Overrides are dotted keys written with ``__`` for the dots. Every worker is shut down after the
    test, the newest first.
    """
    from rlcore.workers.actor import ActorRolloutRefWorker
    from rlcore.workers.critic import CriticWorker

    created: list[Any] = []

    def factory(role: str = "actor", init: bool = True, **overrides: Any) -> Any:
        """A worker for ``role`` built from the small config with ``overrides``."""
        cls = CriticWorker if role == "critic" else ActorRolloutRefWorker
        worker = cls(make_config(**overrides), role, 0, 1)
        created.append(worker)
        if init:
            worker.init_model()
        return worker

    yield factory
    for worker in reversed(created):
        worker.shutdown()


@pytest.fixture
def batch(tiny_tokenizer: Any) -> Any:
    """The contract batch: 4 prompts, random right-padded responses of 6 tokens."""
    from rlcore_testkit.contracts.backend import make_batch

    return make_batch(tiny_tokenizer)
