"""Process-group ownership: a worker destroys only the group it created."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch.distributed as dist


def test_worker_owns_the_group_it_creates(make_worker: Callable[..., Any]) -> None:
    """The first worker creates a gloo group; a second one reuses it; only the creator destroys it."""
    if dist.is_initialized():
        pytest.skip("a process group from another test is active")
    first = make_worker("actor", init=False)
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    second = make_worker("critic", init=False)
    second.shutdown()
    assert dist.is_initialized()
    first.shutdown()
    assert not dist.is_initialized()
    first.shutdown()
