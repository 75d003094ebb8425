"""``trainer.v1``: verl's V1 trainer modes (sync, colocate_async, separate_async) and its sample buffer's
staleness bound; docs/async-training.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rlcore.config.sections.base import Section, is_number

TrainerMode = Literal["sync", "colocate_async", "separate_async"]


def _warmup_problems(section: Section, name: str) -> list[str]:
    value = getattr(section, name)
    if is_number(value) and value >= 0:
        return []
    return [f"{section.key(name)} must be a number of batches >= 0 (fractions allowed), got {value!r}"]


@dataclass(frozen=True)
class ColocateAsyncConfig(Section):
    """``trainer.v1.colocate_async``: generation and training take turns on the same ranks."""

    PATH = "trainer.v1.colocate_async"
    #: batches of prompts issued ahead at the start (fractional: that share of train_batch_size prompts)
    num_warmup_batches: float = 1.0

    def problems(self) -> list[str]:
        """The warmup is a number of batches ≥ 0."""
        return _warmup_problems(self, "num_warmup_batches")


@dataclass(frozen=True)
class SeparateAsyncConfig(Section):
    """``trainer.v1.separate_async``: the rollout lane (placement=split) generates while the trainer trains."""

    PATH = "trainer.v1.separate_async"
    #: batches of prompts issued ahead at the start (fractional: that share of train_batch_size prompts)
    num_warmup_batches: float = 1.0
    #: mini-batch updates per weight sync: must equal data.train_batch_size / actor.ppo_mini_batch_size
    parameter_sync_step: int = 4
    #: with trainer.v1.partial_rollout_tokens: chunk rounds the lane runs with the old weights after a step's batch
    #: is sampled, while the trainer trains on it; the step's new weights load after them (0: none, no overlap)
    rounds_ahead: int = 2

    def problems(self) -> list[str]:
        """The warmup is a number of batches ≥ 0, the sync step a positive count, the rounds ahead a count ≥ 0."""
        return (
            _warmup_problems(self, "num_warmup_batches")
            + self.positive("parameter_sync_step")
            + self.non_negative("rounds_ahead")
        )


@dataclass(frozen=True)
class V1SamplerConfig(Section):
    """``trainer.v1.sampler``: the staleness bound of the sample buffer (async modes only)."""

    PATH = "trainer.v1.sampler"
    #: most policy versions from a prompt's issue to its training (1: on-policy); null: no version control
    max_off_policy_threshold: int | None = 8
    #: drop: evict a group beyond the bound and refill one for one | wait: wait for in-flight groups at the bound
    max_off_policy_strategy: Literal["drop", "wait"] = "drop"

    def problems(self) -> list[str]:
        """The bound is a positive count of versions or null (verl's: 1 is on-policy, 0 is no bound's value)."""
        value = self.max_off_policy_threshold
        if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            return []
        return [
            f"{self.key('max_off_policy_threshold')} must be a positive integer or null, got {value!r}: it counts the "
            "policy versions from a prompt's issue to its training (verl's), so 1 trains every group under the "
            "version it was issued at (on-policy) and null turns version control off"
        ]


@dataclass(frozen=True)
class V1Config(Section):
    """``trainer.v1``: which loop trains (verl's trainer V1 modes)."""

    PATH = "trainer.v1"
    #: sync (generate, then train) | colocate_async (batches issued ahead, same ranks) | separate_async (the
    #: rollout lane generates while the trainer trains; placement=split)
    trainer_mode: TrainerMode = "sync"
    #: trainer_mode=colocate_async: the prompts issued ahead
    colocate_async: ColocateAsyncConfig = field(default_factory=ColocateAsyncConfig)
    #: trainer_mode=separate_async: the prompts issued ahead and the mini-batches per weight sync
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    #: the sample buffer of both async modes: the staleness bound and what happens beyond it
    sampler: V1SamplerConfig = field(default_factory=V1SamplerConfig)
    #: colocate_async and separate_async: partial rollout, tokens per generate_partial chunk (unfinished rows
    #: continue after the weight sync under the new weights); null or 0: whole responses in one call
    partial_rollout_tokens: int | None = None

    def problems(self) -> list[str]:
        """The chunk is a count of tokens ≥ 0 or null, and only the async modes generate in chunks."""
        value = self.partial_rollout_tokens
        if value is None:
            return []
        problems = self.non_negative("partial_rollout_tokens")
        if not problems and value and self.trainer_mode == "sync":
            problems.append(
                f"{self.key('partial_rollout_tokens')}={value}: only trainer.v1.trainer_mode=colocate_async or "
                f"separate_async generates in chunks (got {self.trainer_mode!r}; one-step-off training, "
                "async_training.enable, has no partial rollout); set it to null"
            )
        return problems
