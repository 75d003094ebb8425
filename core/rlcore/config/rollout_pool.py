"""verl's top-level ``rollout`` section (the rollout's own GPUs in its one-step-off and fully-async trainers)
resolved onto rlcore's split placement, and its plan line.

verl's mains copy ``rollout.nnodes`` and ``rollout.n_gpus_per_node`` into the rollout's resource pool: the
rollout generates on GPUs of its own, apart from the trainer's ``trainer.nnodes × trainer.n_gpus_per_node``.
rlcore's ``trainer.placement=split`` is that pool, with ``trainer.rollout_n_gpus_per_node`` rollout ranks on each
of the trainer's nodes: the same GPUs where the node counts are equal, an error naming both keys where not.
``rollout.total_rollout_steps`` (prompts generated in all) bounds the run's steps at that many prompts.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

NODES_KEY = "rollout.nnodes"
GPUS_KEY = "rollout.n_gpus_per_node"
PROMPTS_KEY = "rollout.total_rollout_steps"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve_rollout_pool(config: DictConfig) -> list[str]:
    """Set ``trainer.placement=split`` and ``trainer.rollout_n_gpus_per_node`` from verl's ``rollout.nnodes`` > 0
    and ``rollout.n_gpus_per_node``, and bound ``trainer.total_training_steps`` by ``rollout.total_rollout_steps``;
    the problems found (a pool on other nodes than the trainer's, a pool without GPUs), one message each."""
    pool, trainer = config.get("rollout"), config.trainer
    if pool is None:
        return []
    problems: list[str] = []
    nodes, gpus = pool.get("nnodes"), pool.get("n_gpus_per_node")
    if _count(nodes) and nodes > 0:
        if nodes != trainer.get("nnodes"):
            problems.append(
                f"{NODES_KEY}={nodes} with trainer.nnodes={trainer.get('nnodes')}: rlcore's split placement puts the "
                "rollout's GPUs on the trainer's nodes (trainer.rollout_n_gpus_per_node on each), so the rollout "
                f"pool needs as many nodes as the trainer; set {NODES_KEY} to trainer.nnodes"
            )
        if _count(gpus) and gpus < 1:
            problems.append(f"{NODES_KEY}={nodes} needs {GPUS_KEY} ≥ 1 (the rollout's GPUs per node), got {gpus}")
        trainer.placement = "split"
        if _count(gpus) and gpus > 0:
            trainer.rollout_n_gpus_per_node = gpus
    prompts, batch = pool.get("total_rollout_steps"), config.data.get("train_batch_size")
    if _count(prompts) and prompts > 0 and _count(batch) and batch > 0:
        steps = max(1, prompts // batch)
        given = trainer.get("total_training_steps")
        trainer.total_training_steps = min(steps, given) if _count(given) else steps
    return problems


def plan_line(config: DictConfig) -> str | None:
    """The dry run's line naming how verl's rollout pool was placed (None when the config has none)."""
    pool = config.get("rollout")
    if pool is None or not _count(pool.get("nnodes")) or pool.nnodes < 1:
        return None
    trainer = config.trainer
    line = (
        f"rollout pool: verl's {NODES_KEY}={pool.nnodes}, {GPUS_KEY}={pool.get('n_gpus_per_node')} -> "
        f"trainer.placement=split with trainer.rollout_n_gpus_per_node={trainer.rollout_n_gpus_per_node} on each "
        f"of trainer.nnodes={trainer.nnodes} node(s), apart from the trainer's {trainer.n_gpus_per_node} per node"
    )
    if pool.get("total_rollout_steps") is not None:
        line += (
            f"; {PROMPTS_KEY}={pool.total_rollout_steps} prompts -> trainer.total_training_steps="
            f"{trainer.total_training_steps}"
        )
    return line
