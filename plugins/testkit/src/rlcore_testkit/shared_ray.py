"""One local Ray per test process, shared by the test modules that run on Ray, with warm workers.

A module that asks for the ``warm_ray`` fixture (:mod:`rlcore_testkit.pytest_plugin`) finds a local Ray running and
:func:`rlcore.api.warm_ray_workers` active: its runs attach to that Ray and take over the worker processes the last
run left idle (another module's too), instead of each run starting a Ray and new processes that import torch and
transformers again. The Ray is stopped when a module that does not ask for ``warm_ray`` starts (it may start its own
Ray, or check that a run starts and stops one), and at the end of the test session.
"""

from __future__ import annotations

import contextlib
import os

#: logical CPUs of the shared Ray: the most bundles one test run asks for on one node (runs that need more, or a
#: cluster of several nodes, start their own Ray in a module that does not use ``warm_ray``)
SHARED_RAY_CPUS = 4
#: object store of the shared Ray, as a run's own local Ray has (larger objects spill to disk)
SHARED_RAY_OBJECT_STORE_BYTES = 512 * 2**20


class SharedRay:
    """The test process's shared Ray and its ``warm_ray_workers`` block: started on first use, stopped on demand."""

    def __init__(self) -> None:
        self._warm: contextlib.ExitStack | None = None
        self._started = False

    def start(self) -> None:
        """Make sure a local Ray runs and ``warm_ray_workers`` is active (a no-op when both already are)."""
        import ray

        from rlcore.api import warm_ray_workers

        if not ray.is_initialized():
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")
            ray.init(
                address="local",
                num_cpus=SHARED_RAY_CPUS,
                include_dashboard=False,
                object_store_memory=SHARED_RAY_OBJECT_STORE_BYTES,
            )
            self._started = True
        if self._warm is None:
            self._warm = contextlib.ExitStack()
            self._warm.enter_context(warm_ray_workers())

    def stop(self) -> None:
        """End the ``warm_ray_workers`` block (its idle workers with it) and shut down the Ray :meth:`start` started;
        a no-op when neither is running."""
        if self._warm is not None:
            self._warm.close()
            self._warm = None
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
