"""Worker groups: how the controller calls a role's workers.

The controller only ever calls ``group.method(batch)``. A group splits the batch across its data-parallel
ranks, calls every rank and concatenates the results; per-rank metrics in ``meta["metrics"]`` arrive as
lists and are reduced by :func:`rlcore.tracking.values.reduce_metrics`. The ``local`` executor holds a single worker in the
controller's own process (world size 1), which is what debugging and fast tests want; the ``ray``
executor (:mod:`rlcore.controller.ray_executor`) shares this interface with one Ray actor per rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, overload

from omegaconf import DictConfig

from rlcore.api.groups import ActorGroup, ActorRole, CriticGroup, RewardModelGroup, WorkerGroup
from rlcore.controller.call_stats import CallLedger, CallMeter, worker_stage
from rlcore.controller.worker_spec import WorkerSpec

if TYPE_CHECKING:
    from rlcore.controller.ray_executor import RayWorkerGroup


class LocalWorkerGroup:
    """One worker in this process; method calls go straight to it."""

    def __init__(self, spec: WorkerSpec, config: DictConfig, role: str) -> None:
        self.role = role
        self.world_size = 1
        self.dp_size = 1
        self.calls = CallLedger()
        self.worker = spec.resolve()(config, role, rank=0, world_size=1)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        value = getattr(self.worker, name)
        if not callable(value):
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            meter = CallMeter(name)
            try:
                with meter, worker_stage(self.worker, name):
                    return value(*args, **kwargs)
            finally:
                self.calls.add(name, [meter.stats])

        return timed

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``method(*args, **kwargs)`` of the one worker, as the one-element list of every rank's result."""
        return [getattr(self, method)(*args, **kwargs)]

    def pop_compute_s(self) -> dict[str, float]:
        """Seconds spent inside each worker method since the last call, and reset."""
        return self.calls.pop_seconds()

    def pop_peak_memory_gb(self) -> dict[str, tuple[float, float]]:
        """Peak CUDA GiB (allocated, reserved) of each worker method since the last call, and reset."""
        return self.calls.pop_memory_gb()

    def shutdown(self) -> None:
        """Release the worker's resources (process group, engines)."""
        close = getattr(self.worker, "shutdown", None)
        if close is not None:
            close()


@overload
def make_worker_group(spec: WorkerSpec, config: DictConfig, role: ActorRole, pool: str = "train") -> ActorGroup: ...
@overload
def make_worker_group(
    spec: WorkerSpec, config: DictConfig, role: Literal["critic"], pool: str = "train"
) -> CriticGroup: ...
@overload
def make_worker_group(
    spec: WorkerSpec, config: DictConfig, role: Literal["reward_model"], pool: str = "train"
) -> RewardModelGroup: ...
@overload
def make_worker_group(spec: WorkerSpec, config: DictConfig, role: str, pool: str = "train") -> WorkerGroup: ...
def make_worker_group(
    spec: WorkerSpec, config: DictConfig, role: str, pool: str = "train"
) -> LocalWorkerGroup | RayWorkerGroup:
    """Create the worker group for ``role`` with the executor named by ``trainer.executor``.

    The group's type follows the role: an :class:`~rlcore.api.groups.ActorGroup` for an
    :data:`~rlcore.api.groups.ActorRole`, a ``CriticGroup`` for ``critic``, a ``RewardModelGroup``
    for ``reward_model`` and a plain ``WorkerGroup`` for any other role (e.g. a plugin worker's).

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
