"""The PPO mini/micro-batch update over a :class:`~rlcore.api.training.TrainingEngine`, shared by the
actor and the critic of every backend."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch

from rlcore.algos.functional import loss_units
from rlcore.api.batch import Batch
from rlcore.api.profiling import current_profiler
from rlcore.api.training import MicroBatchLoss, ModelOutput, TrainingEngine
from rlcore.config.batch_sizes import UpdateBatchSizes
from rlcore.workers.micro_batches import plan_micro_batches

#: ``loss_units`` moved to :mod:`rlcore.algos.functional` (the bypass loss needs it) and stays importable here
__all__ = ["MicroBatchObjective", "UpdateSettings", "loss_units", "ppo_update"]

#: ``loss_fn(micro_batch, output) -> (loss, metrics)``: the unscaled loss of one micro-batch as the
#: algorithm defines it (normalised over its own tokens or sequences) and python-float metrics
MicroBatchObjective = Callable[[Batch, ModelOutput], tuple[torch.Tensor, Mapping[str, float]]]


@dataclass(frozen=True)
class UpdateSettings:
    """How one ``update_actor``/``update_critic`` call runs.

    Attributes:
        sizes: per-rank mini- and micro-batch sizes (:func:`rlcore.config.batch_sizes.ppo_batch_sizes`).
        epochs: passes over the batch (``ppo_epochs``).
        grad_clip: the gradient-norm clip (``grad_clip``; None or ≤ 0: none).
        loss_agg_mode: how the algorithm aggregates a loss over tokens (:func:`rlcore.algos.functional.loss_units`).
        prefix: the metric prefix (``actor`` or ``critic``).
        budget: the token budget per micro-batch with ``use_dynamic_bsz``, else None.
        budget_key: the budget's config key, named in warnings.
        temperature: the sampling temperature the log-probs are computed at (actor).
        with_entropy: whether the loss needs the entropy (actor).
        grouped: token-budget micro-batches keep the rows of a prompt together (``actor.use_prefix_grouper``).
    """

    sizes: UpdateBatchSizes
    epochs: int
    grad_clip: float | None
    loss_agg_mode: str
    prefix: str
    budget: int | None = None
    budget_key: str = ""
    temperature: float = 1.0
    with_entropy: bool = False
    grouped: bool = False


def _scaled(
    objective: MicroBatchObjective,
    units: list[float],
    total: float,
    dp_size: int,
    collected: dict[str, list[float]],
    prefix: str,
) -> MicroBatchLoss:
    """The engine's loss function for one mini-batch: micro-batch ``index``'s loss times its share
    ``units[index] / total`` of the global mini-batch, times ``dp_size`` (see :func:`ppo_update`); the
    objective's metrics and the engine's own statistics of the micro-batch (:attr:`ModelOutput.stats`, as
    ``{prefix}/{name}``) are appended to ``collected``."""

    def scaled_loss(index: int, micro: Batch, output: ModelOutput) -> torch.Tensor:
        loss, metrics = objective(micro, output)
        for name, value in metrics.items():
            collected[name].append(float(value))
        for name, value in output.stats.items():
            collected[f"{prefix}/{name}"].append(float(value))
        share = units[index] / total if total else 0.0
        return loss * (dp_size * share)

    return scaled_loss


def _epoch(batch: Batch, size: int, generator: torch.Generator | None) -> Iterator[Batch]:
    """One epoch's mini-batches of ``size`` rows, shuffled with ``generator`` when given."""
    data = batch.index(torch.randperm(len(batch), generator=generator)) if generator is not None else batch
    yield from data.split(size)


def ppo_update(
    engine: TrainingEngine,
    batch: Batch,
    objective: MicroBatchObjective,
    settings: UpdateSettings,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Run ``settings.epochs`` passes of mini-batch updates of ``engine`` over ``batch``; averaged metrics.

    Each mini-batch of ``sizes.mini`` rows is cut into micro-batches of ``sizes.micro`` rows or, with a
    token budget, into token-balanced micro-batches whose count all ranks share. Losses are normalised
    globally: a micro-batch's loss (normalised by its own tokens or sequences, as ``loss_agg_mode`` says)
    is scaled by its share of the mini-batch's tokens or non-empty sequences summed over all data-parallel
    ranks, times their number (engines average gradients over them). The accumulated gradient is then
    exactly that of the whole global mini-batch aggregated at once, for any micro-batching and any number
    of ranks.
    When the gradient norm is not finite the engine skips the step; it is counted in
    ``{prefix}/grad_norm_nonfinite``. Rows are shuffled once per epoch with ``generator`` when given.
    """
    collected: dict[str, list[float]] = defaultdict(list)
    norms: list[float] = []
    skipped = 0
    dp_size = engine.layout.dp_size
    minis = (mini for _ in range(settings.epochs) for mini in _epoch(batch, settings.sizes.mini, generator))
    for index, mini in enumerate(minis):
        with current_profiler().mini_batch(index):
            plan = plan_micro_batches(
                mini,
                size=settings.sizes.micro,
                budget=settings.budget,
                budget_key=settings.budget_key,
                device=engine.device,
                grouped=settings.grouped,
            )
            units = [loss_units(micro["response_mask"], settings.loss_agg_mode) for micro in plan.parts]
            total = engine.all_reduce_sum(sum(units))
            scaled_loss = _scaled(objective, units, total, dp_size, collected, settings.prefix)
            engine.forward_backward(
                plan.parts, scaled_loss, temperature=settings.temperature, with_entropy=settings.with_entropy
            )
            norm = engine.optimizer_step(settings.grad_clip)
            if math.isfinite(norm):
                norms.append(norm)
            else:
                skipped += 1
    out = {name: sum(values) / len(values) for name, values in collected.items()}
    out[f"{settings.prefix}/grad_norm"] = sum(norms) / len(norms) if norms else math.nan
    out[f"{settings.prefix}/grad_norm_nonfinite"] = float(skipped)
    return out
