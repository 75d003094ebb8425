"""Worker groups: how the controller calls a role's workers.

The controller only ever calls ``group.method(batch)``. A group splits the batch across its data-parallel
ranks, calls every rank and concatenates the results; per-rank metrics in ``meta["metrics"]`` arrive as
lists and are reduced by :func:`reduce_metrics`. The ``local`` executor holds a single worker in the
controller's own process (world size 1), which is what debugging and fast tests want; the ``ray``
executor (:mod:`rlcore.controller.ray_executor`) shares this interface with one Ray actor per rank.
"""

from __future__ import annotations

import time
from typing import Any

from omegaconf import DictConfig

from rlcore.controller.contracts import WorkerGroup
from rlcore.controller.worker_spec import WorkerSpec


def reduce_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """Average list-valued metrics (one value per rank or micro-batch) into floats."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, (list, tuple)):
            values = [float(v) for v in value]
            out[key] = sum(values) / len(values) if values else float("nan")
        else:
            out[key] = float(value)
    return out


class LocalWorkerGroup:
    """One worker in this process; method calls go straight to it."""

    def __init__(self, spec: WorkerSpec, config: DictConfig, role: str) -> None:
        self.role = role
        self.world_size = 1
        self.dp_size = 1
        self.compute_s: dict[str, float] = {}
        self.worker = spec.resolve()(config, role, rank=0, world_size=1)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self.worker, name)
        if not callable(value):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                self.compute_s[name] = self.compute_s.get(name, 0.0) + time.perf_counter() - start

        return timed

    def pop_compute_s(self) -> dict[str, float]:
        """Seconds spent inside each worker method since the last call, and reset."""
        out, self.compute_s = self.compute_s, {}
        return out

    def shutdown(self) -> None:
        """Release the worker's resources (process group, engines)."""
        close = getattr(self.worker, "shutdown", None)
        if close is not None:
            close()


def make_worker_group(spec: WorkerSpec, config: DictConfig, role: str, pool: str = "train") -> WorkerGroup:
    """Create the worker group for ``role`` with the executor named by ``trainer.executor``.

    ``local`` gives a :class:`LocalWorkerGroup`; ``ray`` a
    :class:`~rlcore.controller.ray_executor.RayWorkerGroup` on the resource pool ``pool`` (``train``, or
    ``rollout`` with ``trainer.placement=split``; see :mod:`rlcore.controller.placement`).
    """
    from rlcore.config import ConfigError

    executor = config.trainer.executor
    if executor == "local":
        return LocalWorkerGroup(spec, config, role)
    if executor == "ray":
        from rlcore.controller.ray_executor import RayWorkerGroup

        return RayWorkerGroup(spec, config, role, pool)
    raise ConfigError(f"trainer.executor must be local or ray, got {executor!r}")
