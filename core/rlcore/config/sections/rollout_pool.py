"""``rollout`` (top level): the rollout's own GPUs in verl's one-step-off and fully-async trainers
(docs/async-training.md)."""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.config.sections.base import Section


@dataclass(frozen=True)
class RolloutPoolConfig(Section):
    """``rollout``: verl's resource pool of the rollout (its one-step-off and fully-async mains copy it into
    ``actor_rollout_ref.rollout.nnodes`` / ``n_gpus_per_node``); rlcore's split placement
    (rlcore.config.rollout_pool)."""

    PATH = "rollout"
    #: nodes of the rollout's own pool; > 0: trainer.placement=split, on the trainer's nodes (so it must equal
    #: trainer.nnodes); 0: no pool of its own
    nnodes: int = 0
    #: GPUs per node of that pool: trainer.rollout_n_gpus_per_node
    n_gpus_per_node: int = 0
    #: verl's fully-async rollouter: prompts generated in all; the run stops after
    #: total_rollout_steps // data.train_batch_size steps (trainer.total_training_steps); null: the epochs' prompts
    total_rollout_steps: int | None = None

    def problems(self) -> list[str]:
        """Node and GPU counts are ≥ 0, the prompt count positive or null."""
        return (
            self.non_negative("nnodes")
            + self.non_negative("n_gpus_per_node")
            + self.positive("total_rollout_steps", null=True)
        )
