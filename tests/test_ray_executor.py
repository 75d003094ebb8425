"""The ``ray`` executor on a real two-node local Ray cluster: dispatch, placement, failures, split placement.

One ``ray.cluster_utils.Cluster`` (a head node with 6 CPUs and a second node with 1) serves the module;
every group attaches to it through ``trainer.ray_address``. Dispatch and failures use a throwaway
plugin (``rlcore-test-echo``, whose worker class the groups are built from) pip-installed into a target
folder that only the workers see, through ``PYTHONPATH`` in their runtime environment: the driver cannot
even import it, so the test also proves that workers resolve their ``WorkerSpec`` in their own process. Training uses the real FSDP backend on the tiny
model over gloo.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from rlcore_testkit.runs import make_tiny_task, tiny_overrides, tiny_run  # noqa: E402

from rlcore.api.batch import Batch  # noqa: E402
from rlcore.config import ConfigError, load_config  # noqa: E402
from rlcore.config.pools import placement_mode  # noqa: E402
from rlcore.controller import ray_executor  # noqa: E402
from rlcore.controller.groups import build_worker_groups  # noqa: E402
from rlcore.controller.placement import SESSION, warm_ray_workers  # noqa: E402
from rlcore.controller.ray_executor import RayWorkerGroup, WorkerDiedError, WorkerError  # noqa: E402
from rlcore.controller.worker_group import make_worker_group  # noqa: E402
from rlcore.controller.worker_spec import WorkerSpec  # noqa: E402
from rlcore.errors import RLCoreError  # noqa: E402
from rlcore.tracking.sinks import read_metrics  # noqa: E402

ECHO = WorkerSpec("rlcore_test_echo.workers:EchoWorker")

HOOKS = """
import rlcore

@rlcore.hookimpl
def register_training_backends(register):
    register("echo", "rlcore_test_echo.workers:EchoWorker", description="test worker: echoes its rank")
"""

WORKERS = '''
import os

import torch
import torch.distributed as dist

from rlcore.errors import RLCoreError
from rlcore.api.batch import Batch


class EchoWorker:
    def __init__(self, config, role, rank, world_size):
        if role == "broken" and rank == world_size - 1:
            raise RLCoreError(f"echo.start: role 'broken' cannot start on rank {rank}")
        self.role, self.rank, self.world_size = role, rank, world_size

    def tag(self, batch, offset=0):
        self.rows_seen = len(batch)
        out = Batch.from_dict({"x": batch["x"] + offset, "rank": torch.full((len(batch),), self.rank)},
                              meta={"metrics": {"echo/rows": float(len(batch))}, "seen": batch.meta["temperature"]})
        out["name"] = batch["name"]
        return out

    def whoami(self):
        from rlcore.plugins import load_plugins

        records = load_plugins().records
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "RLCORE_DISABLE_PLUGINS", "ECHO_MARK")
        return {"rank": self.rank, "env": {k: os.environ.get(k) for k in keys},
                "ppo": records["rlcore-plugin-ppo"].status, "echo": records["rlcore-test-echo"].status}

    def all_reduce(self):
        if not dist.is_initialized():
            dist.init_process_group("gloo", init_method="env://", rank=self.rank, world_size=self.world_size)
        value = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(value)
        return float(value.item())

    def fail(self, ranks, then_all_reduce=False):
        if self.rank in ranks:
            raise RLCoreError(f"echo.key=3 is not allowed (rank {self.rank})")
        if then_all_reduce:
            self.all_reduce()

    def crash(self):
        return {}["missing key"]

    def die(self, rank):
        if self.rank == rank:
            os._exit(7)
        self.all_reduce()

    def mark(self):
        os.environ["ECHO_MARK"] = self.role
        return os.getpid()

    def shutdown(self):
        if dist.is_initialized():
            dist.destroy_process_group()


class TensorParallelEchoWorker(EchoWorker):
    """Both ranks are one data-parallel rank (as tensor-parallel peers are); rank 0 answers."""

    def init_model(self):
        pass

    def parallel_layout(self):
        from rlcore.api.training import ParallelLayout

        return ParallelLayout(dp_rank=0, dp_size=1, is_output_rank=self.rank == 0)

    def rows(self):
        return self.rows_seen
'''


@contextmanager
def environ(**values: str) -> Iterator[None]:
    """Set environment variables for the block, restoring the previous values afterwards."""
    previous = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, throwaway_plugins) -> Iterator[Any]:
    """A two-node local Ray cluster (head: 6 CPUs, second node: 1 CPU) and the echo plugin on the workers'
    ``PYTHONPATH``; Ray is shut down and the cluster removed at the end."""
    from ray.cluster_utils import Cluster

    site = throwaway_plugins(
        tmp_path_factory.mktemp("echo-src"),
        tmp_path_factory.mktemp("echo-site"),
        {"rlcore-test-echo": ("rlcore_test_echo", "0.0.1", {"hooks.py": HOOKS, "workers.py": WORKERS})},
    )
    # the echo plugin first, then the caller's own path (a worktree's sources, when its environment sets them)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    with environ(RAY_AUTH_MODE=os.environ.get("RAY_AUTH_MODE", "disabled"), PYTHONPATH=path):
        ray_cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 6})
        ray_cluster.add_node(num_cpus=1)
        ray_cluster.wait_for_nodes()
        try:
            yield ray_cluster
        finally:
            if ray.is_initialized():
                ray.shutdown()
            ray_cluster.shutdown()


def ray_config(cluster: Any, *overrides: str) -> Any:
    """A config for the ray executor on ``cluster`` (2 CPU ranks on one node unless overridden)."""
    base = [
        "trainer.executor=ray",
        "trainer.device=cpu",
        f"trainer.ray_address={cluster.address}",
        "trainer.n_gpus_per_node=2",
    ]
    return load_config([], [*base, *overrides], [])


@pytest.fixture(scope="module")
def echo(cluster: Any) -> Iterator[RayWorkerGroup]:
    """Two echo workers, created with ``RLCORE_DISABLE_PLUGINS=rlcore-plugin-ppo`` in the driver."""
    with environ(RLCORE_DISABLE_PLUGINS="rlcore-plugin-ppo"):
        group = make_worker_group(ECHO, ray_config(cluster), "actor")
    yield group
    group.shutdown()


@pytest.fixture(scope="module")
def warm(cluster: Any) -> Iterator[None]:
    """``warm_ray_workers`` for the module's training tests (the last ones): each takes over the FSDP workers of
    the one before where the pool and environment match."""
    with warm_ray_workers():
        yield


@pytest.fixture
def fast_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1 s grace period for the ranks that are still running after another one failed."""
    monkeypatch.setattr(ray_executor, "FAILURE_GRACE_S", 1.0)


def make_batch(n: int) -> Batch:
    """``n`` rows with a tensor ``x`` and a non-tensor ``name``."""
    return Batch.from_dict(
        {"x": torch.arange(n) * 10, "name": np.array([f"row{i}" for i in range(n)], dtype=object)},
        meta={"temperature": 1.0},
    )


# ------------------------------------------------------------------ dispatch
def test_the_driver_cannot_resolve_the_echo_backend_but_workers_do(echo: RayWorkerGroup) -> None:
    from rlcore.plugins import load_plugins

    assert "rlcore-test-echo" not in load_plugins().records
    assert echo.world_size == 2
    assert echo.whoami()["echo"] == "ok"


@pytest.mark.parametrize("rows", [5, 1, 4])
def test_batch_is_padded_split_in_rank_order_and_unpadded(echo: RayWorkerGroup, rows: int) -> None:
    out = echo.tag(make_batch(rows), offset=1)
    assert len(out) == rows
    assert out["x"].tolist() == [10 * i + 1 for i in range(rows)]
    assert list(out["name"]) == [f"row{i}" for i in range(rows)]
    per_rank = (rows + 1) // 2
    assert out["rank"].tolist() == ([0] * per_rank + [1] * per_rank)[:rows]
    assert out.meta["metrics"]["echo/rows"] == [float(per_rank)] * 2
    assert out.meta["seen"] == 1.0


def test_model_parallel_peers_get_the_same_chunk_and_one_answers(cluster: Any) -> None:
    """After ``init_model`` the group reads the ranks' layouts: two ranks of one data-parallel rank both
    receive the whole batch, and only the output rank's result comes back."""
    group = make_worker_group(
        WorkerSpec("rlcore_test_echo.workers:TensorParallelEchoWorker"), ray_config(cluster), "actor"
    )
    try:
        group.init_model()
        out = group.tag(make_batch(3), offset=1)
        assert out["x"].tolist() == [1, 11, 21] and out["rank"].tolist() == [0, 0, 0]
        assert out.meta["metrics"]["echo/rows"] == [3.0]
        assert group.call_all("rows") == [3, 3]
    finally:
        group.shutdown()


def test_other_calls_are_broadcast_and_return_rank_0s_result(echo: RayWorkerGroup) -> None:
    assert echo.whoami()["rank"] == 0
    infos = echo.call_all("whoami")
    assert [info["rank"] for info in infos] == [0, 1]
    envs = [info["env"] for info in infos]
    assert [(env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) for env in envs] == [("0", "2", "0"), ("1", "2", "1")]
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] and envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]


def test_workers_load_plugins_with_the_drivers_rlcore_variables(echo: RayWorkerGroup) -> None:
    for info in echo.call_all("whoami"):
        assert info["env"]["RLCORE_DISABLE_PLUGINS"] == "rlcore-plugin-ppo"
        assert info["ppo"] == "disabled"


def test_gloo_group_across_the_workers(echo: RayWorkerGroup) -> None:
    assert echo.call_all("all_reduce") == [3.0, 3.0]


def test_colocated_groups_share_the_placement_groups(cluster: Any, echo: RayWorkerGroup) -> None:
    critic = make_worker_group(ECHO, ray_config(cluster), "critic")
    try:
        assert critic._pools == echo._pools
        assert [i["node_id"] for i in critic.rank_info()] == [i["node_id"] for i in echo.rank_info()]
    finally:
        critic.shutdown()
    assert echo.whoami()["rank"] == 0


# ------------------------------------------------------------------ failures
def test_an_exception_on_every_rank_names_the_rank_and_keeps_the_group(echo: RayWorkerGroup) -> None:
    with pytest.raises(WorkerError, match=r"role 'actor' rank [01]: fail\(\) failed: echo.key=3 is not allowed"):
        echo.fail([0, 1])
    with pytest.raises(WorkerError, match=r"rank 1: fail\(\) failed: echo.key=3 is not allowed \(rank 1\)") as info:
        echo.fail([1])
    assert info.value.rank == 1 and info.value.role == "actor"
    assert echo.whoami()["rank"] == 0


def test_an_unexpected_exception_carries_the_worker_traceback(echo: RayWorkerGroup) -> None:
    with pytest.raises(WorkerError, match=r"crash\(\) raised KeyError: 'missing key'") as info:
        echo.crash()
    assert isinstance(info.value.cause, KeyError)
    assert "workers.py" in str(info.value) and "in crash" in str(info.value)
    assert "ray::" not in str(info.value)


def test_a_rank_failing_while_the_others_wait_in_a_collective_stops_the_group(
    cluster: Any, fast_failures: None
) -> None:
    group = make_worker_group(ECHO, ray_config(cluster), "actor")
    start = time.perf_counter()
    with pytest.raises(WorkerError, match=r"role 'actor' rank 1: fail\(\) failed: echo.key=3"):
        group.fail([1], then_all_reduce=True)
    assert time.perf_counter() - start < 20
    with pytest.raises(WorkerError, match="rank 1"):
        group.whoami()
    group.shutdown()


def test_a_worker_process_exiting_stops_the_controller_within_seconds(cluster: Any, fast_failures: None) -> None:
    group = make_worker_group(ECHO, ray_config(cluster), "rollout")
    start = time.perf_counter()
    with pytest.raises(WorkerDiedError, match=r"role 'rollout' rank 1: the worker process died during die\(\)"):
        group.die(1)
    assert time.perf_counter() - start < 20
    with pytest.raises(WorkerDiedError, match="rank 1"):
        group.tag(make_batch(2))
    group.shutdown()


def test_a_killed_actor_is_reported_on_the_next_call(cluster: Any) -> None:
    group = make_worker_group(ECHO, ray_config(cluster), "critic")
    ray.kill(group.actors[1])
    start = time.perf_counter()
    with pytest.raises(
        WorkerDiedError,
        match=r"role 'critic' rank 1: the worker process died during whoami\(\): "
        r".*ray\.kill",
    ) as info:
        group.whoami()
    assert time.perf_counter() - start < 10
    assert info.value.rank == 1
    group.shutdown()


def test_a_worker_that_cannot_start_names_its_rank(cluster: Any) -> None:
    users = dict(SESSION.users)
    with pytest.raises(WorkerError, match=r"role 'broken' rank 1: starting the worker failed: echo.start"):
        make_worker_group(ECHO, ray_config(cluster), "broken")
    assert SESSION.users == users, "the failed group gave its pool back"


def test_config_errors_name_the_key(cluster: Any) -> None:
    with pytest.raises(ConfigError, match="trainer.placement=split .* needs trainer.executor=ray"):
        placement_mode(load_config([], ["trainer.placement=split", "trainer.executor=local"], []))
    with pytest.raises(ConfigError, match="trainer.placement must be one of colocated, split"):
        placement_mode(load_config([], ["trainer.placement=spread"], []))
    with pytest.raises(RLCoreError, match=r"trainer.nnodes=3 needs 3 Ray node\(s\)"):
        make_worker_group(ECHO, ray_config(cluster, "trainer.nnodes=3", "trainer.n_gpus_per_node=1"), "actor")


# ------------------------------------------------------------- warm workers
def idle_actors() -> list[Any]:
    """The actors ``warm_ray_workers`` keeps idle now."""
    return [actor for actors in SESSION.idle.values() for actor in actors]


def is_gone(actor: Any) -> bool:
    """Whether ``actor``'s process has ended (Ray refuses the call, or the call fails with the actor's death)."""
    try:
        ray.get(actor.info.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return True
    except Exception as exc:  # noqa: BLE001 - Ray's plain Exception for an actor it no longer knows
        return "Can't find actor" in str(exc)
    return False


def test_inside_warm_ray_workers_the_next_group_takes_over_the_idle_processes(cluster: Any) -> None:
    """A group that shut down leaves its processes to the next group with the same environment: same pids, the
    environment they started with (the mark the last worker set is gone), a new gloo group, the new role. Another
    environment gets processes of its own and ends the idle ones it cannot use; leaving the block ends every idle
    actor."""
    assert not SESSION.warm, "runs before the tests that use the module's warm fixture"
    with warm_ray_workers():
        first = make_worker_group(ECHO, ray_config(cluster), "actor")
        pids = first.call_all("mark")
        assert [info["env"]["ECHO_MARK"] for info in first.call_all("whoami")] == ["actor", "actor"]
        first.shutdown()
        assert len(idle_actors()) == 2
        second = make_worker_group(ECHO, ray_config(cluster), "critic")
        try:
            assert [info["pid"] for info in second.rank_info()] == pids
            infos = second.call_all("whoami")
            assert [(info["rank"], info["env"]["ECHO_MARK"]) for info in infos] == [(0, None), (1, None)]
            assert [info["env"]["RLCORE_DISABLE_PLUGINS"] for info in infos] == [None, None]
            assert second.call_all("all_reduce") == [3.0, 3.0]
            assert second.call_all("mark") == pids and second.whoami()["env"]["ECHO_MARK"] == "critic"
        finally:
            second.shutdown()
        ended = idle_actors()
        with environ(RLCORE_DISABLE_PLUGINS="rlcore-plugin-ppo"):
            other = make_worker_group(ECHO, ray_config(cluster), "actor")
        try:
            assert not set(pids) & {info["pid"] for info in other.rank_info()}, "another environment, other processes"
            assert [info["ppo"] for info in other.call_all("whoami")] == ["disabled", "disabled"]
            assert not idle_actors(), "the idle actors no group of this pool can take are ended"
        finally:
            other.shutdown()
        kept = idle_actors()
        assert len(kept) == 2
    assert not SESSION.idle and all(layout in SESSION.users for layout in SESSION.pools)
    assert all(is_gone(actor) for actor in ended + kept)


def test_a_warm_worker_that_died_while_idle_is_replaced_and_a_failed_group_is_not_kept(cluster: Any) -> None:
    assert not SESSION.warm, "runs before the tests that use the module's warm fixture"
    with warm_ray_workers():
        first = make_worker_group(ECHO, ray_config(cluster), "actor")
        pids = [info["pid"] for info in first.rank_info()]
        first.shutdown()
        for (_, rank, _), actors in SESSION.idle.items():
            if rank == 1:
                for actor in actors:
                    ray.kill(actor)
        second = make_worker_group(ECHO, ray_config(cluster), "actor")
        try:
            now = [info["pid"] for info in second.rank_info()]
            assert now[0] == pids[0] and now[1] != pids[1]
            assert second.call_all("all_reduce") == [3.0, 3.0]
        finally:
            second.shutdown()
        kept = len(idle_actors())
        with pytest.raises(WorkerError, match=r"role 'broken' rank 1: starting the worker failed"):
            make_worker_group(ECHO, ray_config(cluster), "broken")
        assert len(idle_actors()) == kept - 2, "the failed group took two idle actors and kept none"


# ---------------------------------------------------------------- multi-node
def test_two_nodes_one_rank_each_form_one_gloo_group(cluster: Any) -> None:
    group = make_worker_group(ECHO, ray_config(cluster, "trainer.nnodes=2", "trainer.n_gpus_per_node=1"), "actor")
    try:
        nodes = [info["node_id"] for info in group.rank_info()]
        assert nodes == [cluster.head_node.node_id, cluster.list_all_nodes()[1].node_id]
        assert [info["env"]["LOCAL_RANK"] for info in group.rank_info()] == ["0", "0"]
        assert group.call_all("all_reduce") == [3.0, 3.0]
    finally:
        group.shutdown()


def test_grpo_steps_on_two_nodes(cluster: Any, warm: None, tmp_path: Path, tiny_model_dir: Path) -> None:
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "trainer.executor=ray",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=1",
        f"trainer.ray_address={cluster.address}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    )
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["training/global_step"] for row in rows] == [1, 2]
    assert np.isfinite(last["actor/pg_loss"]) and last["actor/grad_norm"] > 0
    assert last["rollout/weight_checksum_diff"] <= 1e-6


# ------------------------------------------------------------ split placement
@pytest.mark.parametrize("backend", ["naive", "delta"])
def test_split_placement_trains_on_one_pool_and_generates_on_another(
    cluster: Any, warm: None, tmp_path: Path, tiny_model_dir: Path, backend: str
) -> None:
    from transformers import AutoTokenizer

    from rlcore.config.schema import Sections
    from rlcore.data.collate import collate_rows
    from rlcore.data.custom import load_dataset_class
    from rlcore.plugins import load_plugins

    task = make_tiny_task(tmp_path / "task")
    config = ray_config(
        cluster,
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        "trainer.executor=ray",
        "trainer.placement=split",
        "trainer.n_gpus_per_node=2",
        "trainer.rollout_n_gpus_per_node=1",
        "actor_rollout_ref.actor.use_kl_loss=true",
        # buckets of 16 KiB: smaller than the embeddings, which then travel alone
        "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=0.015625",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}",
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    dataset = load_dataset_class(Sections.from_tree(config).data, load_plugins().registry)(
        config.data.train_files, tokenizer, config.data, split="train"
    )
    prompts = collate_rows([dataset[i] for i in range(3)])
    transport = load_plugins().registry.load("weight_transport", backend)
    groups = build_worker_groups(config, use_reference=True, use_critic=False, transport=transport)
    try:
        assert groups.split and groups.actor.world_size == 2 and groups.rollout.world_size == 1
        assert (groups.actor.role, groups.rollout.role) == ("actor_ref", "rollout")
        groups.init_models()
        batch = groups.rollout.generate_sequences(prompts.repeat(2))
        assert len(batch) == 6
        batch.union(groups.actor.compute_log_prob(batch))
        batch.union(groups.actor.compute_ref_log_prob(batch))
        batch["advantages"] = torch.randn(batch["response_mask"].shape)
        metrics = groups.actor.update_actor(batch).meta["metrics"]
        assert len(metrics["actor/pg_loss"]) == 2
        sync = groups.sync_weights()
        assert sync["rollout/weight_checksum_diff"] <= 1e-6
        assert sync["rollout/weight_version"] == 2.0
        assert sync["actor/weight_sync_buckets"] > 2
        if backend == "delta":  # float32 rollout: every element moved, every tensor goes whole; then nothing
            assert sync["actor/weight_sync_delta_fraction"] == 1.0
            again = groups.sync_weights()
            assert again["actor/weight_sync_bytes"] == 0.0 and again["rollout/weight_checksum_diff"] <= 1e-6
        assert len(groups.rollout.generate_sequences(prompts)) == 3
    finally:
        groups.shutdown()


# ------------------------------------------------------------ partial rollout
def test_generate_partial_is_split_over_the_rollout_ranks(
    cluster: Any, warm: None, tmp_path: Path, tiny_model_dir: Path
) -> None:
    """``groups.rollout.generate_partial`` goes to the rollout ranks like ``generate_sequences`` (the rows split
    over two data-parallel ranks and concatenated in order, the budget in ``meta``), and the next call
    continues the rows the previous one returned until every row is finished."""
    from transformers import AutoTokenizer

    from rlcore.config.schema import Sections
    from rlcore.data.collate import collate_rows
    from rlcore.data.custom import load_dataset_class
    from rlcore.plugins import load_plugins

    task = make_tiny_task(tmp_path / "task")
    config = ray_config(
        cluster, *tiny_overrides(tmp_path, tiny_model_dir, task), "actor_rollout_ref.rollout.ignore_eos=true"
    )
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    dataset = load_dataset_class(Sections.from_tree(config).data, load_plugins().registry)(
        config.data.train_files, tokenizer, config.data, split="train"
    )
    prompts = collate_rows([dataset[i] for i in range(3)])
    groups = build_worker_groups(config, use_reference=False, use_critic=False)
    try:
        groups.init_models()
        assert groups.rollout.dp_size == 2
        prompts.meta["max_new_tokens"] = 3
        first = groups.rollout.generate_partial(prompts)
        assert len(first) == 3 and first["response_mask"].sum(dim=1).tolist() == [3, 3, 3]
        assert torch.equal(first["prompts"], prompts["input_ids"])
        out = first
        while not bool(out["finished"].all()):
            out = groups.rollout.generate_partial(out)
        assert out["response_mask"].sum(dim=1).tolist() == [8, 8, 8]
        assert torch.equal(out["responses"][:, :3], first["responses"][:, :3])
        assert bool((out["rollout_versions"] == 1).all()), "every token comes from the first synced weights"
    finally:
        groups.shutdown()
