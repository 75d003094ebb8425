"""Per-rank batch arithmetic of the PPO update and the inference passes: the one place that derives it.

verl's semantics: ``ppo_mini_batch_size`` counts prompts (times ``rollout.n`` responses) and is split over
the data-parallel ranks; ``ppo_micro_batch_size_per_gpu`` and ``log_prob_micro_batch_size_per_gpu`` count
responses on one rank; the deprecated global ``ppo_micro_batch_size`` / ``log_prob_micro_batch_size`` are
divided by the data-parallel size (for the update they must divide evenly). The dry run (:mod:`rlcore.config.validate`) and
the workers both call these functions, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from rlcore.config.keys import positive_int, select
from rlcore.config.schema import LogProbConfig, PPOUpdateConfig, Section
from rlcore.errors import RLCoreError

ROLLOUT_N_KEY = "actor_rollout_ref.rollout.n"
#: the switch and budget fields of a log-prob pass (:class:`~rlcore.config.schema.LogProbConfig`), for
#: :func:`token_budget`
LOG_PROB_BUDGET = ("log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu")


@dataclass(frozen=True)
class UpdateBatchSizes:
    """The update's sizes on one data-parallel rank, in responses.

    Attributes:
        mini: responses per mini-batch on one rank (one optimizer step each).
        micro: responses per micro-batch (``mini // micro`` gradient-accumulation steps), or the whole
            mini-batch without ``*_micro_batch_size_per_gpu``.
        micro_from_default: whether ``micro`` fell back to the whole mini-batch (nothing was set).
    """

    mini: int
    micro: int
    micro_from_default: bool = False


def ppo_batch_sizes(section: PPOUpdateConfig, n: int, dp_size: int) -> UpdateBatchSizes:
    """The per-rank mini- and micro-batch sizes of the update of ``section`` (the actor's or the critic's)
    with ``n`` responses per prompt over ``dp_size`` data-parallel ranks; every error names its key. With
    ``use_dynamic_bsz`` the token budget forms the micro-batches, so the micro-batch size need not divide the
    mini-batch (verl ignores it then too)."""
    n = positive_int(n, ROLLOUT_N_KEY)
    mini_key = section.key("ppo_mini_batch_size")
    micro_key = section.key("ppo_micro_batch_size_per_gpu")
    mini_prompts = positive_int(section.ppo_mini_batch_size, mini_key)
    responses = mini_prompts * n
    if responses % dp_size:
        raise RLCoreError(
            f"{mini_key} ({mini_prompts}) × {ROLLOUT_N_KEY} ({n}) = {responses} responses must be divisible by "
            f"the number of data-parallel ranks ({dp_size})"
        )
    mini = responses // dp_size
    micro = section.ppo_micro_batch_size_per_gpu
    if micro is None and section.ppo_micro_batch_size is not None:
        micro = per_rank(section.ppo_micro_batch_size, section.key("ppo_micro_batch_size"), micro_key, dp_size)
    if micro is None:
        return UpdateBatchSizes(mini, mini, micro_from_default=True)
    micro = positive_int(micro, micro_key)
    if mini % micro and not section.use_dynamic_bsz:
        raise RLCoreError(
            f"the per-rank mini-batch ({mini_key} {mini_prompts} × n {n} / {dp_size} data-parallel ranks = {mini} "
            f"responses) must be divisible by {micro_key} ({micro})"
        )
    return UpdateBatchSizes(mini, micro)


def ulysses_size(config: DictConfig, section: str) -> int:
    """``{section}.ulysses_sequence_parallel_size`` (1 when absent): how many ranks split each sequence;
    the data-parallel size is the world size divided by it (:func:`data_parallel_size`)."""
    key = f"{section}.ulysses_sequence_parallel_size"
    return positive_int(select(config, key, 1), key)


def legacy_per_rank(config: DictConfig, legacy_key: str, per_gpu_key: str, dp_size: int) -> int:
    """The deprecated global micro-batch size at the dotted ``legacy_key`` of ``config`` divided over
    ``dp_size`` ranks (:func:`per_rank`)."""
    return per_rank(select(config, legacy_key), legacy_key, per_gpu_key, dp_size)


def per_rank(legacy: object, legacy_key: str, per_gpu_key: str, dp_size: int) -> int:
    """A deprecated global micro-batch size ``legacy`` (config key ``legacy_key``) divided over ``dp_size``
    ranks; it must divide."""
    size = positive_int(legacy, legacy_key)
    if size % dp_size:
        raise RLCoreError(
            f"{legacy_key} ({size}) must be divisible by the number of data-parallel ranks ({dp_size}); "
            f"or set {per_gpu_key}"
        )
    return size // dp_size


def forward_micro_batch_size(section: Section, per_gpu: str, legacy: str, dp_size: int) -> int | None:
    """The micro-batch of a forward pass without gradients: field ``per_gpu`` of ``section`` (responses on one
    rank), or its deprecated global field ``legacy`` divided by ``dp_size`` (rounded down, at least 1: any size
    gives the same results); None = the whole batch in one pass. Errors name the key."""
    per_rank_size = getattr(section, per_gpu)
    if per_rank_size is not None:
        return positive_int(per_rank_size, section.key(per_gpu))
    global_size = getattr(section, legacy)
    if global_size is None:
        return None
    return max(1, positive_int(global_size, section.key(legacy)) // dp_size)


def inference_micro_batch_size(section: LogProbConfig, dp_size: int) -> int | None:
    """The log-prob pass's micro-batch of ``section`` (the rollout's or the reference's):
    ``log_prob_micro_batch_size_per_gpu``, else ``log_prob_micro_batch_size`` over the ranks
    (:func:`forward_micro_batch_size`)."""
    return forward_micro_batch_size(section, "log_prob_micro_batch_size_per_gpu", "log_prob_micro_batch_size", dp_size)


def token_budget(section: Section, flag: str, budget: str) -> int | None:
    """The per-micro-batch token budget, field ``budget`` of ``section``, when its ``use_dynamic_bsz`` switch
    (field ``flag``) is true, else None (micro-batches of a fixed number of rows); errors name the key."""
    if not getattr(section, flag):
        return None
    return positive_int(getattr(section, budget), section.key(budget))


def data_parallel_size(config: DictConfig, section: str, world_size: int) -> int:
    """The data-parallel size of the engine at config ``section`` over ``world_size`` ranks.

    It asks the backend's spec (``TrainingBackendSpec.data_parallel_size``: a function
    ``(config, section, world_size) -> int`` in the plugin's light hooks module) and defaults to
    ``world_size``: every rank is its own data-parallel rank, as with FSDP. Ulysses sequence parallelism
    (``{section}.ulysses_sequence_parallel_size``) divides it further: the ranks of a sequence-parallel
    group share one data-parallel rank.
    """
    from rlcore.plugins import load_plugins

    strategy = select(config, f"{section}.strategy") or select(config, "actor_rollout_ref.actor.strategy")
    derive = load_plugins().registry.spec("training_backend", strategy).data_parallel_size
    size = world_size if derive is None else int(derive(config, section, world_size))
    sequence_parallel = ulysses_size(config, section)
    if size % sequence_parallel:
        raise RLCoreError(
            f"{section}.ulysses_sequence_parallel_size={sequence_parallel} must divide the number of "
            f"data-parallel ranks before sequence parallelism ({size} of {world_size} ranks)"
        )
    return size // sequence_parallel
