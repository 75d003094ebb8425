"""Fixtures for the Megatron backend tests: one torch thread, configs around the session's tiny model."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Run the backend's tests with one intra-op thread: the tiny model gains nothing from more, and the
    machine's cores are shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def moe_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Qwen3-MoE (2 layers, 8 experts, top-2)."""
    from rlcore_testkit.tiny import make_tiny_moe_model_dir

    return make_tiny_moe_model_dir(tmp_path_factory.mktemp("moe"))


@pytest.fixture(scope="module")
def jobs() -> Iterator[Any]:
    """The :mod:`multirank_jobs` helper module (test_multirank, test_vpp, test_cp), importable by name in
    spawned processes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).parent))
        import multirank_jobs

        yield multirank_jobs
        sys.modules.pop("multirank_jobs", None)


def pytest_configure(config: pytest.Config) -> None:
    """Hide megatron-core's expected warnings (no Transformer Engine or Apex on this machine, deprecations
    inside megatron-core itself)."""
    for pattern in (
        r"ignore:.*Transformer Engine and Apex are not installed",
        r"ignore:Apex is not installed",
        r"ignore::DeprecationWarning:megatron\..*",
        r"ignore:.*tp_group is None",
        r"ignore:.*MLP requires ffn_hidden_size",
        r"ignore:full scope is deprecated",
    ):
        config.addinivalue_line("filterwarnings", pattern)
