"""Fixtures for the DeepSpeed backend tests: one torch thread, DeepSpeed's CPU accelerator chosen up front."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# DeepSpeed probes for accelerators at import and warns that it falls back to the CPU; name it instead
os.environ.setdefault("DS_ACCELERATOR", "cpu")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """Run the backend's tests with one intra-op thread: the tiny model gains nothing from more, and the
    machine's cores are shared."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
