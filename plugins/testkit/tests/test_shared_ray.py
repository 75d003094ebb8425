"""The test kit's shared Ray (``warm_ray``, ``no_shared_ray``): one local Ray per test process with warm workers,
started again when a module needs it after another stopped it."""

from __future__ import annotations

from typing import Any

import pytest

ray = pytest.importorskip("ray")

from rlcore_testkit.shared_ray import SHARED_RAY_CPUS  # noqa: E402

from rlcore.controller.placement import SESSION  # noqa: E402


def test_warm_ray_keeps_one_ray_with_warm_workers_and_stop_ends_both(shared_ray: Any, warm_ray: None) -> None:
    assert ray.is_initialized() and SESSION.warm
    node = ray.get_runtime_context().get_node_id()
    assert ray.cluster_resources()["CPU"] == SHARED_RAY_CPUS
    shared_ray.start()
    assert ray.get_runtime_context().get_node_id() == node, "a second start keeps the running Ray"
    shared_ray.stop()
    assert not ray.is_initialized() and not SESSION.warm and not SESSION.idle
    shared_ray.start()
    assert ray.is_initialized() and SESSION.warm and ray.get_runtime_context().get_node_id() != node
