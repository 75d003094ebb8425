"""The ``ray`` executor: one Ray actor per rank, behind the worker-group interface of ``LocalWorkerGroup``.

Every actor is a generic :class:`RayWorker`. It receives the driver's ``RLCORE_*`` variables (and
``ray_kwargs.ray_init.runtime_env.env_vars``), gets
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` (rank 0's node address and a
port that was free there), loads its own plugins and resolves the :class:`WorkerSpec` by name — worker
classes and registry objects never travel. Calls follow the dispatch rule of ``docs/architecture.md``: a
method whose first argument is a :class:`Batch` gets the batch padded to a multiple of the world size,
chunked over the data-parallel ranks (every rank of a tensor- or pipeline-parallel group gets the same
chunk), and the output ranks' results concatenated in data-parallel order without the padding; any other
call is broadcast and rank 0's result returned once every rank succeeded.

A worker failure stops the controller with a :class:`WorkerError` naming the role, the rank and the cause
(the worker's own exception message, or why its process died). When a rank dies or the other ranks do not
finish within :data:`FAILURE_GRACE_S` of a failure (they are stuck in a collective with the failed one),
the whole group is killed and every later call raises the same error.

Inside :func:`~rlcore.controller.placement.warm_ray_workers` a group that shut down cleanly leaves its actors idle,
and the next group on the same pool with the same environment and pinning takes them over
(:meth:`RayWorker.reset`) instead of starting new processes.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import re
import socket
from collections.abc import Hashable
from typing import Any

import ray
from omegaconf import DictConfig
from ray.exceptions import RayError, RayTaskError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlcore.api.batch import Batch
from rlcore.api.training import ParallelLayout
from rlcore.config.lanes import LANE_KEY, LanePin, format_cpus, lane_pins
from rlcore.config.ray_kwargs import ray_env_vars
from rlcore.controller.call_stats import CallLedger, CallMeter, CallStats, worker_stage
from rlcore.controller.placement import BUNDLE_SHARE, POOL_TRAIN, SESSION, PoolLayout, kill_actors
from rlcore.controller.worker_spec import WorkerSpec
from rlcore.errors import RLCoreError
from rlcore.plugins import PLUGIN_ENV_VARS

log = logging.getLogger(__name__)

#: variables the workers inherit from the driver besides every ``RLCORE_*`` variable
PASSTHROUGH_ENV: tuple[str, ...] = (
    "PYTHONPATH",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "HF_HUB_DISABLE_PROGRESS_BARS",
    "TRANSFORMERS_OFFLINE",
)
#: after one rank failed, how long the other ranks may take to finish before the group is killed
FAILURE_GRACE_S = 5.0
#: how long a graceful worker shutdown may take before the actors are killed
SHUTDOWN_TIMEOUT_S = 30.0


class WorkerError(RLCoreError):
    """A worker raised, or its process died; names the role, the rank and the cause.

    ``cause`` is the worker's original exception when it could be sent back, ``worker_traceback`` the
    worker-side traceback text.
    """

    def __init__(
        self,
        message: str,
        *,
        role: str,
        rank: int,
        method: str,
        cause: BaseException | None = None,
        worker_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.role = role
        self.rank = rank
        self.method = method
        self.cause = cause
        self.worker_traceback = worker_traceback


class WorkerDiedError(WorkerError):
    """A worker process died (killed, out of memory, crashed) or could not be reached."""


def worker_env(config: DictConfig) -> dict[str, str]:
    """The environment of a worker: every ``RLCORE_*`` variable and :data:`PASSTHROUGH_ENV` of the driver, then
    ``ray_kwargs.ray_init.runtime_env.env_vars`` (which win over the driver's values)."""
    env = {k: v for k, v in os.environ.items() if k.startswith("RLCORE_")}
    env.update({k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ})
    env.update(ray_env_vars(config))
    return env


def free_port() -> int:
    """A TCP port that is free on this host right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


class RayWorker:
    """The Ray actor behind one rank: builds the backend's worker in its process and runs its methods."""

    def __init__(self, env: dict[str, str], role: str, rank: int) -> None:
        """Apply the driver's environment; plugin variables the driver does not set are removed."""
        self._started_environ = dict(os.environ)
        self.worker: Any = None
        self._enter(env, role, rank)

    def _enter(self, env: dict[str, str], role: str, rank: int) -> None:
        """Take the role and rank, and the driver's environment ``env`` over the process's own."""
        for key in PLUGIN_ENV_VARS:
            if key not in env:
                os.environ.pop(key, None)
        os.environ.update(env)
        self.role = role
        self.rank = rank

    def reset(self, env: dict[str, str], role: str, rank: int) -> int:
        """Serve another group (:func:`~rlcore.controller.placement.warm_ray_workers`): the process gets back the
        environment it started with (what the last worker set or removed is undone), then ``env``, ``role`` and
        ``rank`` as a new actor would. Returns the process id."""
        for key in set(os.environ) - set(self._started_environ):
            del os.environ[key]
        for key, value in self._started_environ.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        self._enter(env, role, rank)
        return os.getpid()

    def __repr__(self) -> str:
        """``RayWorker(role, rank)``, which Ray shows in its messages."""
        return f"RayWorker({self.role}, rank {self.rank})"

    def node_address(self) -> tuple[str, int]:
        """This node's IP address and a free port on it (rank 0's answer becomes ``MASTER_ADDR:PORT``)."""
        return ray.util.get_node_ip_address(), free_port()

    def info(self) -> dict[str, Any]:
        """Where this rank runs: ``pid``, ``ip``, ``node_id`` and the distributed environment variables."""
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", *PLUGIN_ENV_VARS)
        return {
            "pid": os.getpid(),
            "ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "env": {k: os.environ[k] for k in keys if k in os.environ},
        }

    def pin(self, pin: LanePin) -> tuple[list[int], int]:
        """Pin this process to its lane's cores and torch threads (``trainer.lane_cpus``) before any torch work;
        returns the cores and threads now in effect. Cores this node does not have raise :class:`RLCoreError`
        naming the key."""
        from rlcore.process_env import pin_process

        missing = pin.cpus - set(os.sched_getaffinity(0))
        if missing:
            raise RLCoreError(
                f"{LANE_KEY} ({self.role} pool): cores {format_cpus(missing)} are not among the usable cores "
                f"{format_cpus(os.sched_getaffinity(0))} of node {ray.util.get_node_ip_address()}"
            )
        threads = pin_process(pin.cpus, pin.threads)
        return sorted(os.sched_getaffinity(0)), threads

    def build(self, worker: str, config: DictConfig, world_size: int, local_rank: int, master: tuple[str, int]) -> None:
        """Set the distributed variables, load the plugins and construct ``worker_cls(config, role, rank, world)``.

        ``worker`` is the :class:`WorkerSpec` name (``actor`` or ``critic``); the worker resolves its training
        backend through this process's plugin registry.
        ``LOCAL_RANK`` is the rank's index on its node, or 0 when Ray gave the actor its own GPU (Ray then
        restricts ``CUDA_VISIBLE_DEVICES`` to it).
        """
        os.environ.update(
            {
                "RANK": str(self.rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": "0" if ray.get_gpu_ids() else str(local_rank),
                "MASTER_ADDR": master[0],
                "MASTER_PORT": str(master[1]),
            }
        )
        worker_cls = WorkerSpec(worker).resolve()
        self.worker = worker_cls(config, self.role, self.rank, world_size)

    def execute(self, method: str, call: tuple[tuple[Any, ...], dict[str, Any]], keep: bool) -> tuple[Any, CallStats]:
        """Run ``worker.method(*args, **kwargs)``; return ``(result or None when keep is false, stats)``, where
        ``stats`` (:class:`CallStats`) hold the time spent in the method itself (not in Ray's (de)serialisation)
        and, on CUDA, its peak memory."""
        args, kwargs = call
        with CallMeter(method) as meter, worker_stage(self.worker, method):
            result = getattr(self.worker, method)(*args, **kwargs)
        return (result if keep else None), meter.stats

    def shutdown(self) -> None:
        """Call the worker's ``shutdown()`` (process group, engines) when it has one, then let the worker go (its
        models are freed; the process may serve another group)."""
        close = getattr(self.worker, "shutdown", None)
        if close is not None:
            close()
        self.worker = None
        gc.collect()
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def _strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _death_reason(exc: Exception) -> str:
    """A short reason from a Ray actor-death error: "killed by `ray.kill`", the worker's exit detail, ...

    An unexpected exit gets a hint at the usual causes; the process id and node address are added when
    Ray reports them.
    """
    text = _strip_ansi(str(exc))
    detail = re.search(r"Worker exit detail: (.*?)(?: Some common causes|\n|$)", text)
    because = re.search(r"The actor is dead because (.*?)(?:\n|$)", text)
    if detail:
        reason = detail.group(1).strip().rstrip(".") + " (killed by a signal or the out-of-memory killer, or crashed)"
    elif because:
        reason = because.group(1).strip().rstrip(".")
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        reason = lines[0] if lines else type(exc).__name__
    pid, ip = re.search(r"\bpid: (\d+)", text), re.search(r"\bip: (\S+)", text)
    if pid and ip:
        reason += f"; it was pid {pid.group(1)} on {ip.group(1)}"
    return reason


def _worker_traceback(exc: Exception) -> str:
    """The worker-side traceback of a Ray task error: its frames and the exception line, without Ray's
    ``ray::...`` header and the markers left where Ray cut its own frames."""
    lines = _strip_ansi(getattr(exc, "traceback_str", None) or str(exc)).splitlines()
    first = next((i for i, line in enumerate(lines) if line.lstrip().startswith('File "')), len(lines))
    return "\n".join(lines[first:])


@functools.cache
def _actor_class() -> Any:
    """:class:`RayWorker` as a Ray actor class (made once per driver)."""
    return ray.remote(RayWorker)


class _Method:
    """``group.<name>``: calling it dispatches ``name`` to every rank of the group."""

    def __init__(self, group: RayWorkerGroup, name: str) -> None:
        self._group = group
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Dispatch the call by the rule in the module docstring."""
        return self._group.dispatch(self.__name__, *args, **kwargs)


class RayWorkerGroup:
    """The ranks of one role as Ray actors on a resource pool; ``group.method(...)`` calls every rank."""

    def __init__(self, spec: WorkerSpec, config: DictConfig, role: str, pool: str = POOL_TRAIN) -> None:
        """Start one actor per bundle of ``pool`` (see :mod:`rlcore.controller.placement`) and build the
        workers; a rank that fails to start raises :class:`WorkerError` and leaves nothing running."""
        self.spec = spec
        self.role = role
        self.pool_name = pool
        self.world_size = 0
        self.actors: list[Any] = []
        self._failure: WorkerError | None = None
        self._closed = False
        self._in_flight = False
        self.calls = CallLedger()
        self.layouts: list[ParallelLayout] = []
        #: the pool layout and identity the actors are kept under (:func:`warm_ray_workers`), once every rank is built
        self._keep_as: tuple[PoolLayout, Hashable] | None = None
        pin = lane_pins(config).get(pool)  # a bad trainer.lane_cpus fails before any process starts
        self._pools = pools = SESSION.acquire(config)
        try:
            if pool not in pools:
                raise RLCoreError(f"role {role!r}: there is no {pool!r} pool (trainer.placement, pools: {list(pools)})")
            resource_pool = pools[pool]
            self.world_size = resource_pool.layout.world_size
            share = {"num_cpus": BUNDLE_SHARE, "num_gpus": BUNDLE_SHARE if resource_pool.layout.use_gpu else 0}
            env = worker_env(config)
            identity = (tuple(sorted(env.items())), pin)
            bundles = resource_pool.bundles()
            self.actors = self._idle_actors(resource_pool.layout, identity, env, len(bundles))
            for rank, (pg, index) in enumerate(bundles):
                if self.actors[rank] is None:
                    strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)
                    options = {"scheduling_strategy": strategy, "runtime_env": {"env_vars": env}, "max_restarts": 0}
                    self.actors[rank] = _actor_class().options(**share, **options).remote(env, role, rank)
            if pin is not None:
                self._gather([actor.pin.remote(pin) for actor in self.actors], "pin")
            (master,) = self._gather([self.actors[0].node_address.remote()], "node_address", ranks=[0])
            self._gather(
                [
                    actor.build.remote(spec.worker, config, self.world_size, local_rank, master)
                    for actor, (_, local_rank) in zip(self.actors, bundles)
                ],
                "__init__",
            )
            self._keep_as = (resource_pool.layout, identity)
        except BaseException:
            self.shutdown()
            raise

    def _idle_actors(self, layout: PoolLayout, identity: Hashable, env: dict[str, str], ranks: int) -> list[Any]:
        """For each rank, an idle actor of an earlier group (:func:`warm_ray_workers`) given this group's
        environment, role and rank, or None where there is none; one that died while idle is ended and its rank
        left to a new actor."""
        actors = [SESSION.take_idle(layout, rank, identity) for rank in range(ranks)]
        for rank, actor in enumerate(actors):
            if actor is None:
                continue
            try:
                ray.get(actor.reset.remote(env, self.role, rank), timeout=SHUTDOWN_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - Ray's errors for a dead actor, or its refusal to call one it lost
                log.debug("the idle worker for %s rank %d is gone (%s); starting a new one", self.role, rank, exc)
                kill_actors([actor])
                actors[rank] = None
        return actors

    def __getattr__(self, name: str) -> Any:
        """``group.name`` is a callable that dispatches the worker method ``name``."""
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)

    # ------------------------------------------------------------------ calls
    def dispatch(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call ``method`` on every rank: split a leading :class:`Batch` over the data-parallel ranks, else
        broadcast (rank 0's result). After ``init_model`` the ranks' :class:`ParallelLayout` are read once."""
        self._check_usable(method)
        if args and isinstance(args[0], Batch):
            return self._dispatch_batch(method, args[0], args[1:], kwargs)
        shared = ray.put((args, kwargs))
        refs = [self._execute(actor, method, shared, rank == 0) for rank, actor in enumerate(self.actors)]
        result = self._unwrap(method, self._gather(refs, method))[0]
        if method == "init_model":
            self.layouts = self.call_all("parallel_layout")
        return result

    def _execute(self, actor: Any, method: str, call: Any, keep: bool) -> Any:
        """``actor.execute(method, call, keep)`` as a Ray task named ``<role>.<method>``: Ray's timeline
        (``ray_kwargs.timeline_json_file``) and dashboard show each call by role and method, so the busy time of
        each pool can be read from it (``bench/async_throughput.py``)."""
        return actor.execute.options(name=f"{self.role}.{method}").remote(method, call, keep)

    def _dispatch_batch(self, method: str, batch: Batch, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Pad ``batch`` to a multiple of the data-parallel size, give chunk ``dp_rank`` to every rank of that
        data-parallel rank, and concatenate the output ranks' results in data-parallel order, unpadded.
        Before the layouts are known every rank is its own data-parallel rank."""
        layouts = self.layouts or [ParallelLayout(rank, self.world_size) for rank in range(self.world_size)]
        dp_size = self.dp_size
        padded, pad = batch.pad_to_divisor(dp_size)
        chunks = padded.chunk(dp_size)
        refs = [
            self._execute(actor, method, ((chunks[layout.dp_rank], *args), kwargs), layout.is_output_rank)
            for actor, layout in zip(self.actors, layouts, strict=True)
        ]
        results = self._unwrap(method, self._gather(refs, method))
        by_dp_rank = {layout.dp_rank: result for layout, result in zip(layouts, results) if layout.is_output_rank}
        out = Batch.concat([by_dp_rank[dp_rank] for dp_rank in range(dp_size)])
        return out.unpad(pad) if pad and len(out) == len(padded) else out

    @property
    def dp_size(self) -> int:
        """How many chunks a batch is cut into: the data-parallel size (the world size before ``init_model``)."""
        return self.layouts[0].dp_size if self.layouts else self.world_size

    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Broadcast ``method(*args, **kwargs)`` and return every rank's result, in rank order."""
        self._check_usable(method)
        shared = ray.put((args, kwargs))
        return self._unwrap(
            method, self._gather([self._execute(actor, method, shared, True) for actor in self.actors], method)
        )

    def _unwrap(self, method: str, results: list[tuple[Any, CallStats]]) -> list[Any]:
        """The ranks' results of ``execute``; their stats go to the ledger (the slowest rank's seconds)."""
        self.calls.add(method, [stats for _, stats in results])
        return [r for r, _ in results]

    def pop_compute_s(self) -> dict[str, float]:
        """Seconds the workers spent inside each method since the last call (slowest rank), and reset."""
        return self.calls.pop_seconds()

    def pop_peak_memory_gb(self) -> dict[str, tuple[float, float]]:
        """Peak CUDA GiB (allocated, reserved) of each method since the last call (largest rank), and reset."""
        return self.calls.pop_memory_gb()

    def rank_info(self) -> list[dict[str, Any]]:
        """Each rank's ``pid``, ``ip``, ``node_id`` and distributed environment, in rank order."""
        self._check_usable("rank_info")
        return self._gather([actor.info.remote() for actor in self.actors], "rank_info")

    def _check_usable(self, method: str) -> None:
        """Raise the group's earlier failure, or an error when it was shut down."""
        if self._failure is not None:
            raise self._failure
        if self._closed:
            raise RLCoreError(f"role {self.role!r}: {method}() called after the worker group was shut down")

    def _gather(self, refs: list[Any], method: str, ranks: list[int] | None = None) -> list[Any]:
        """Wait for every ref and return the results in order, failing fast.

        When a rank raises, the others get :data:`FAILURE_GRACE_S` to finish; a rank whose process died
        stops the wait at once. The error of a dead rank (else the first error seen) is raised; when a
        rank died or some did not finish, the group is killed first.
        """
        ranks = list(range(len(refs))) if ranks is None else ranks
        pending = dict(zip(refs, ranks))
        results: dict[int, Any] = {}
        errors: list[tuple[int, Exception]] = []
        died: list[tuple[int, Exception]] = []
        self._in_flight = True  # stays set when the wait is interrupted (Ctrl-C): shutdown() then kills at once
        while pending and not died:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=FAILURE_GRACE_S if errors else None)
            if not ready:
                break
            for ref in ready:
                rank = pending.pop(ref)
                try:
                    results[rank] = ray.get(ref)
                except RayError as exc:
                    errors.append((rank, exc))
                    if not isinstance(exc, RayTaskError):
                        died.append((rank, exc))
        self._in_flight = False
        if not errors:
            return [results[rank] for rank in ranks]
        rank, cause = (died or errors)[0]
        error = self._to_error(rank, cause, method)
        if died or pending:
            self._fail(error)
        raise error

    def _to_error(self, rank: int, exc: Exception, method: str) -> WorkerError:
        """A :class:`WorkerError` for rank ``rank`` from a Ray error, with the worker's own message."""
        where = f"role {self.role!r} rank {rank}"
        call = "starting the worker" if method == "__init__" else f"{method}()"
        if isinstance(exc, RayTaskError):
            cause = exc.cause
            while isinstance(cause, RayTaskError) and cause.cause is not None:
                cause = cause.cause
            tb = _worker_traceback(exc)
            if isinstance(cause, RLCoreError):
                message = f"{where}: {call} failed: {cause}"
            else:
                name = type(cause).__name__ if cause is not None else "error"
                message = f"{where}: {call} raised {name}: {cause}\nworker traceback:\n{tb}"
            return WorkerError(message, role=self.role, rank=rank, method=method, cause=cause, worker_traceback=tb)
        reason = _death_reason(exc)
        return WorkerDiedError(
            f"{where}: the worker process died during {call}: {reason}",
            role=self.role,
            rank=rank,
            method=method,
            cause=exc,
        )

    @staticmethod
    def _all_succeeded(refs: list[Any]) -> bool:
        """Whether every finished call of ``refs`` returned without an error."""
        try:
            ray.get(refs)
        except RayError:
            return False
        return True

    def _fail(self, error: WorkerError) -> None:
        """Remember ``error`` for later calls and kill every actor of the group."""
        log.debug("%s; stopping the %d worker(s) of role %r", error, self.world_size, self.role)
        self._failure = error
        self._kill()

    def _kill(self) -> None:
        """Kill every actor (those already dead are skipped)."""
        kill_actors(self.actors)

    def shutdown(self) -> None:
        """Shut the workers down (their ``shutdown()``, then the actors) and release the pool; idempotent.

        After a failure, or when a call was interrupted, the actors are killed without waiting for them.
        """
        if self._closed:
            return
        self._closed = True
        self.actors = [actor for actor in self.actors if actor is not None]  # a start that failed half-way
        if self.actors and self._failure is None and not self._in_flight:
            refs = [actor.shutdown.remote() for actor in self.actors]
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=SHUTDOWN_TIMEOUT_S)
            if SESSION.warm and self._keep_as is not None and len(done) == len(refs) and self._all_succeeded(done):
                SESSION.park(*self._keep_as, self.actors)
                self.actors = []
        self._kill()
        self.actors = []
        SESSION.release(self._pools)
