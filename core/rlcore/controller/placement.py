"""Ray start-up and resource pools for the ``ray`` executor.

A *pool* is one STRICT_PACK placement group per node, each holding one bundle per rank: ``{"CPU": 1}``
plus ``{"GPU": 1}`` when the run uses CUDA. On CPU, ``trainer.n_gpus_per_node`` therefore means *worker
processes per node*. Every worker actor requests only :data:`BUNDLE_SHARE` of its bundle, so the workers
of several roles (actor/rollout/ref and critic) sit on the same bundles and time-share each device —
verl's hybrid engine. ``trainer.placement`` chooses the pools:

``colocated`` (default)
    one pool, ``train``, of ``trainer.nnodes × trainer.n_gpus_per_node`` ranks for every role;
``split``
    the ``train`` pool for actor, reference and critic, and a ``rollout`` pool of
    ``trainer.nnodes × trainer.rollout_n_gpus_per_node`` ranks on the same nodes for generation.

A reward model (``reward_model.enable``) shares the ``train`` pool, or with
``reward_model.enable_resource_pool=true`` gets a ``reward`` pool of ``trainer.nnodes ×
reward_model.n_gpus_per_node`` ranks on the same nodes.

Each pool's placement groups are pinned to distinct nodes (the driver's node first), so ranks
``node × per_node … node × per_node + per_node − 1`` share a node. Ray itself is started on first use
(``trainer.ray_address: null``: a local Ray with just the CPUs the ranks need) or attached to
(``trainer.ray_address``: ``auto`` or ``host:port`` of a cluster started with ``ray start --head``); an
already initialised Ray (``ray.init`` by the caller) is used as it is. ``ray_kwargs.ray_init`` adds to or
overrides the ``ray.init`` arguments, and ``ray_kwargs.timeline_json_file`` receives Ray's timeline when
the last group leaves. :data:`SESSION` counts the worker
groups that use the pools: the last one to leave removes the placement groups and stops the Ray it started.

Inside :func:`warm_ray_workers` (several runs in one Python process: a sweep, a notebook, a test module) a worker
group that shuts down cleanly leaves its actors idle on their pool instead of ending them, and the next group on the
same pool with the same environment takes them over: its ranks skip the seconds a new process spends importing torch
and the model libraries. Leaving the block ends the idle actors, removes their pools and stops the Ray it started.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlcore.config import ConfigError
from rlcore.config.keys import positive_key
from rlcore.config.pools import bundles_per_node, placement_mode, reward_pool
from rlcore.config.ray_kwargs import (
    ENV_VARS_KEY,
    RAY_INIT,
    TIMELINE_KEY,
    given_ray_kwargs,
    ray_init_options,
    timeline_file,
)
from rlcore.errors import RLCoreError

POOL_TRAIN = "train"
POOL_ROLLOUT = "rollout"
POOL_REWARD = "reward"
#: the share of its bundle's CPU (and GPU) each worker actor requests: up to four roles share a bundle
BUNDLE_SHARE = 0.25
#: how long to wait for the placement groups before reporting that the cluster lacks resources
PLACEMENT_TIMEOUT_S = 120.0
#: object store size of a locally started Ray (larger objects spill to disk)
LOCAL_OBJECT_STORE_BYTES = 512 * 2**20
#: the node label Ray gives every node, used to pin a placement group to a node
NODE_ID_LABEL = "ray.io/node-id"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolLayout:
    """The shape of one pool: ``nnodes`` nodes with ``per_node`` ranks each, with or without GPUs."""

    name: str
    nnodes: int
    per_node: int
    use_gpu: bool

    @property
    def world_size(self) -> int:
        """The number of ranks (bundles) in the pool."""
        return self.nnodes * self.per_node

    def bundle(self) -> dict[str, float]:
        """The resources of one rank's bundle."""
        return {"CPU": 1.0, "GPU": 1.0} if self.use_gpu else {"CPU": 1.0}


def wants_gpu(config: DictConfig) -> bool:
    """Whether bundles hold a GPU: ``trainer.device`` is ``cuda``, or ``auto`` on a cluster with GPUs.

    Needs an initialised Ray for ``auto``.
    """
    import ray

    device = str(config.trainer.device).lower()
    if device == "cpu":
        return False
    if device.startswith("cuda"):
        return True
    if device == "auto":
        return ray.cluster_resources().get("GPU", 0) > 0
    raise ConfigError(f"trainer.device must be auto, cpu or cuda, got {device!r}")


def pool_layouts(config: DictConfig, use_gpu: bool) -> dict[str, PoolLayout]:
    """The pools the config asks for, by name (``train``, and ``rollout`` with split placement)."""
    nnodes = positive_key(config, "trainer.nnodes")
    layouts = {POOL_TRAIN: PoolLayout(POOL_TRAIN, nnodes, positive_key(config, "trainer.n_gpus_per_node"), use_gpu)}
    if placement_mode(config) == "split":
        layouts[POOL_ROLLOUT] = PoolLayout(
            POOL_ROLLOUT, nnodes, positive_key(config, "trainer.rollout_n_gpus_per_node"), use_gpu
        )
    if reward_pool(config):
        layouts[POOL_REWARD] = PoolLayout(
            POOL_REWARD, nnodes, positive_key(config, "reward_model.n_gpus_per_node"), use_gpu
        )
    return layouts


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Raise ``OSError`` unless ``HOST:PORT`` (optionally ``scheme://HOST:PORT``) accepts TCP
    connections; ``auto`` is left to Ray. ``ray.init`` itself retries an unreachable address forever."""
    if address == "auto":
        return
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("expected auto or HOST:PORT")
    with socket.create_connection((host, int(port)), timeout=timeout_s):
        pass


def ensure_ray(config: DictConfig) -> bool:
    """Initialise Ray for the run unless it already is; returns whether this call started it.

    ``trainer.ray_address`` null starts a local Ray with ``num_cpus`` = the bundles the ranks need, no
    dashboard, a small object store and token authentication off (unless ``RAY_AUTH_MODE`` is set);
    otherwise the driver attaches to the cluster at that address. ``ray_kwargs.ray_init`` is passed to
    ``ray.init`` over these choices (:func:`rlcore.config.ray_kwargs.ray_init_options`).
    """
    import ray

    if ray.is_initialized():
        ignored = [key for key in given_ray_kwargs(config) if not key.startswith(ENV_VARS_KEY) and key != TIMELINE_KEY]
        if ignored:
            log.warning("%s: unused, Ray was started before the run (only env_vars reach the workers)", ignored)
        return False
    address = config.trainer.ray_address
    nnodes = positive_key(config, "trainer.nnodes")
    if address:
        hint = "Start one with `ray start --head` (and `ray start --address=HEAD:PORT` on the other nodes)"
        try:
            check_reachable(str(address))
            _init_ray(str(address), {"log_to_driver": True, **ray_init_options(config, attach=True)})
        except ConfigError:
            raise
        except (OSError, RuntimeError, ValueError) as exc:
            message = f"trainer.ray_address={address!r}: cannot attach to a Ray cluster there ({exc})"
            raise RLCoreError(f"{message}. {hint}") from exc
        return True
    if nnodes > 1:
        raise ConfigError(
            f"trainer.nnodes={nnodes} needs a Ray cluster: start one with `ray start --head` on the first node and "
            "`ray start --address=HEAD:PORT` on the others, then set trainer.ray_address=HEAD:PORT (or auto)"
        )
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    defaults = {
        "num_cpus": bundles_per_node(config),
        "include_dashboard": False,
        "object_store_memory": LOCAL_OBJECT_STORE_BYTES,
        "log_to_driver": True,
    }
    # address "local": a private cluster even when `ray start` left one recorded on this machine
    _init_ray("local", {**defaults, **ray_init_options(config, attach=False)})
    return True


def _init_ray(address: str, options: dict[str, Any]) -> None:
    """``ray.init(address, **options)``, after which the run's stop handling is put back (Ray installs a SIGTERM
    handler of its own); an argument Ray does not know (added with ``+ray_kwargs.ray_init.<name>``) is a
    :class:`ConfigError` naming the section."""
    import ray

    from rlcore.graceful_stop import reclaim_stop_handlers

    try:
        ray.init(address=address, **options)
    except (TypeError, RuntimeError) as exc:
        if isinstance(exc, RuntimeError) and "Unknown keyword argument" not in str(exc):
            raise
        raise ConfigError(f"{RAY_INIT}: ray.init() refused the options {sorted(options)}: {exc}") from exc
    finally:
        reclaim_stop_handlers()


def select_nodes(nnodes: int, need: dict[str, float]) -> list[str]:
    """The ids of ``nnodes`` alive nodes whose resources cover ``need`` each: the driver's node first,
    then by address. Raises :class:`RLCoreError` listing the nodes when too few fit."""
    import ray

    alive = [node for node in ray.nodes() if node.get("Alive")]
    fit = [node for node in alive if all(node["Resources"].get(k, 0.0) >= v for k, v in need.items())]
    driver = ray.get_runtime_context().get_node_id()
    fit.sort(key=lambda node: (node["NodeID"] != driver, node["NodeManagerAddress"], node["NodeID"]))
    if len(fit) < nnodes:
        nodes = "; ".join(
            node["NodeManagerAddress"] + " (" + ", ".join(f"{k}={node['Resources'].get(k, 0):g}" for k in need) + ")"
            for node in alive
        )
        raise RLCoreError(
            f"trainer.nnodes={nnodes} needs {nnodes} Ray node(s) with {need} each (one bundle per rank of "
            f"trainer.n_gpus_per_node, plus trainer.rollout_n_gpus_per_node with trainer.placement=split), "
            f"but only {len(fit)} of the cluster's nodes have that: {nodes}"
        )
    return [node["NodeID"] for node in fit[:nnodes]]


class ResourcePool:
    """One STRICT_PACK placement group per node for a :class:`PoolLayout`, pinned to ``node_ids``."""

    def __init__(self, layout: PoolLayout, node_ids: list[str]) -> None:
        from ray.util.placement_group import placement_group

        self.layout = layout
        self.node_ids = node_ids
        bundles = [layout.bundle() for _ in range(layout.per_node)]
        tag = uuid.uuid4().hex[:8]
        self.placement_groups = [
            placement_group(
                bundles,
                strategy="STRICT_PACK",
                name=f"rlcore-{layout.name}-{tag}-node{node_rank}",
                bundle_label_selector=[{NODE_ID_LABEL: node_id}] * layout.per_node,
            )
            for node_rank, node_id in enumerate(node_ids)
        ]

    def wait_ready(self, timeout_s: float = PLACEMENT_TIMEOUT_S) -> None:
        """Block until every placement group is placed; raise :class:`RLCoreError` after ``timeout_s``."""
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            ray.get([pg.ready() for pg in self.placement_groups], timeout=timeout_s)
        except GetTimeoutError as exc:
            raise RLCoreError(
                f"the {self.layout.name!r} pool ({self.layout.nnodes} node(s) x {self.layout.per_node} bundle(s) "
                f"{self.layout.bundle()}) was not placed within {timeout_s:g} s; resources free now: "
                f"{ray.available_resources()}. Other jobs may hold them (check `ray status`)"
            ) from exc

    def bundles(self) -> list[tuple[Any, int]]:
        """``(placement group, bundle index)`` of every rank, in rank order; the index is the local rank."""
        return [(pg, i) for pg in self.placement_groups for i in range(self.layout.per_node)]

    def remove(self) -> None:
        """Release the placement groups."""
        from ray.util.placement_group import remove_placement_group

        for pg in self.placement_groups:
            remove_placement_group(pg)
        self.placement_groups = []


def write_timeline(path: str) -> None:
    """Write Ray's timeline of this job's tasks and actors to ``path`` (Chrome trace JSON); a file that cannot
    be written is reported in the log, the run's results are kept."""
    import ray

    target = Path(path).expanduser()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        ray.timeline(filename=str(target))
    except OSError as exc:
        log.warning("%s=%s: Ray's timeline could not be written: %s", TIMELINE_KEY, path, exc)
        return
    log.info("Ray's timeline written to %s", target)


class RaySession:
    """The driver's Ray state: whether it started Ray, the pools with the number of groups using each, and
    (inside :func:`warm_ray_workers`) the idle worker actors kept for the next group.

    Groups whose configs ask for the same :class:`PoolLayout` share its placement groups (colocation); a
    different layout gets placement groups of its own.
    """

    def __init__(self) -> None:
        self.started = False
        self.timeline: str | None = None
        self.pools: dict[PoolLayout, ResourcePool] = {}
        self.users: dict[PoolLayout, int] = {}
        #: whether groups leave their actors idle for the next group (:func:`warm_ray_workers`)
        self.warm = False
        #: idle worker actors by (pool layout, rank, the group's identity: its environment and lane pinning)
        self.idle: dict[tuple[PoolLayout, int, Hashable], list[Any]] = {}
        #: the Ray the pools live in (node and job of the driver): pools and actors of another are gone
        self.cluster: tuple[str, str] | None = None

    def acquire(self, config: DictConfig) -> dict[str, ResourcePool]:
        """Make sure Ray runs and the config's pools exist; count one more user of each. Returns the pools
        by name; give them back with :meth:`release`."""
        placement_mode(config)
        self.timeline = timeline_file(config) or self.timeline
        if ensure_ray(config):  # a new Ray: pools from an earlier one are gone with it
            self.started, self.pools, self.users, self.idle = True, {}, {}, {}
        self._forget_another_ray()
        try:
            layouts = pool_layouts(config, wants_gpu(config))
            missing = [layout for layout in layouts.values() if layout not in self.pools]
            if missing:  # idle pools of other layouts give their resources back first
                for layout in [layout for layout in self.pools if layout not in self.users]:
                    self._remove(layout)
            self._create_pools(missing)
        except BaseException:
            if not self.users:
                self._stop()
            raise
        for layout in layouts.values():
            self.users[layout] = self.users.get(layout, 0) + 1
        return {name: self.pools[layout] for name, layout in layouts.items()}

    def _forget_another_ray(self) -> None:
        """Drop the pools and idle actors of an earlier Ray that someone else stopped or replaced since."""
        import ray

        context = ray.get_runtime_context()
        cluster = (context.get_node_id(), context.get_job_id())
        if cluster != self.cluster:
            self.pools, self.users, self.idle, self.cluster = {}, {}, {}, cluster

    def _create_pools(self, layouts: list[PoolLayout]) -> None:
        """Pick nodes for ``layouts`` together and place each of them there."""
        if not layouts:
            return
        per_node = sum(layout.per_node for layout in layouts)
        need = {"CPU": float(per_node), **({"GPU": float(per_node)} if layouts[0].use_gpu else {})}
        node_ids = select_nodes(layouts[0].nnodes, need)
        created = [ResourcePool(layout, node_ids) for layout in layouts]
        try:
            for pool in created:
                pool.wait_ready()
        except BaseException:
            for pool in created:
                pool.remove()
            raise
        self.pools.update({pool.layout: pool for pool in created})

    def release(self, pools: dict[str, ResourcePool]) -> None:
        """Give back pools from :meth:`acquire`. A pool nobody uses is removed, unless :func:`warm_ray_workers`
        keeps it for its idle actors; when no group is left, the Ray this session started is shut down (at the
        end of the ``warm_ray_workers`` block when it kept pools)."""
        for pool in pools.values():
            layout = pool.layout
            self.users[layout] = self.users.get(layout, 1) - 1
            if self.users[layout] <= 0:
                self.users.pop(layout)
                if not self.warm:
                    self._remove(layout)
        if not self.users:
            self._stop()

    def park(self, layout: PoolLayout, identity: Hashable, actors: list[Any]) -> None:
        """Keep a group's actors idle (rank ``i`` of ``layout`` is ``actors[i]``) for the next group on the same
        pool whose ``identity`` (environment and lane pinning) is the same."""
        for rank, actor in enumerate(actors):
            self.idle.setdefault((layout, rank, identity), []).append(actor)

    def take_idle(self, layout: PoolLayout, rank: int, identity: Hashable) -> Any | None:
        """An idle actor for rank ``rank`` of ``layout`` with ``identity``, or None. Idle actors of the pool with
        another identity are ended first: no group can take them, and they hold a share of the bundles."""
        for key in [key for key in self.idle if key[0] == layout and key[2] != identity]:
            kill_actors(self.idle.pop(key))
        actors = self.idle.get((layout, rank, identity))
        return actors.pop() if actors else None

    def cool_down(self) -> None:
        """End the idle actors, remove the pools no group uses, and stop the Ray this session started when no
        group is left (the end of :func:`warm_ray_workers`)."""
        for layout in [layout for layout in self.pools if layout not in self.users]:
            self._remove(layout)
        for actors in self.idle.values():
            kill_actors(actors)
        self.idle = {}
        if not self.users:
            self._stop()

    def _remove(self, layout: PoolLayout) -> None:
        """End the idle actors on ``layout``'s pool and remove its placement groups."""
        import ray

        for key in [key for key in self.idle if key[0] == layout]:
            kill_actors(self.idle.pop(key))
        pool = self.pools.pop(layout)
        if ray.is_initialized():
            pool.remove()

    def _stop(self) -> None:
        """Write Ray's timeline when ``ray_kwargs.timeline_json_file`` asks for it, then shut down Ray if this
        session started it and keeps no idle pool (placement groups go with it)."""
        import ray

        if self.timeline and ray.is_initialized():
            write_timeline(self.timeline)
        self.timeline = None
        if self.pools:
            return
        if self.started and ray.is_initialized():
            ray.shutdown()
        self.pools, self.users, self.idle, self.started = {}, {}, {}, False


def kill_actors(actors: list[Any]) -> None:
    """End the Ray ``actors``; those already gone are skipped."""
    import ray

    for actor in actors:
        try:
            ray.kill(actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - an actor that is gone already
            log.debug("ray.kill(%s): %s", actor, exc)


#: the driver's process-wide session, shared by every :class:`~rlcore.controller.ray_executor.RayWorkerGroup`
SESSION = RaySession()


@contextlib.contextmanager
def warm_ray_workers() -> Iterator[None]:
    """Keep the ``ray`` executor's worker processes between the runs inside the block.

    ::

        with warm_ray_workers():
            for lr in (1e-6, 3e-6):
                run_training([], [..., "trainer.executor=ray", f"actor_rollout_ref.actor.optim.lr={lr}"], [])

    A worker group that shuts down cleanly leaves its actors idle on their pool; the next group on a pool of the
    same layout, with the same worker environment (every ``RLCORE_*`` variable, ``PASSTHROUGH_ENV`` and
    ``ray_kwargs.ray_init.runtime_env.env_vars``) and lane pinning, takes them over instead of starting new
    processes. A reused actor gets the environment it started with back and builds its worker anew, as a new
    process would (the worker seeds every generator and creates its process group). A group on another layout
    first ends the idle pools it does not use. Leaving the block ends the idle actors, removes their pools and
    stops the Ray a run started. Nested blocks are one block. A failed or interrupted group is never kept.
    """
    if SESSION.warm:
        yield
        return
    SESSION.warm = True
    try:
        yield
    finally:
        SESSION.warm = False
        SESSION.cool_down()
