"""The SFT worker: rlcore's actor worker (role ``actor``: the trainable engine, no rollout, no reference)
with a supervised step and a validation loss.

Everything else — the training engine of ``actor_rollout_ref.actor.strategy``, the micro-batching and
global loss normalisation of :func:`rlcore.api.ppo_update`, checkpoints with their
``huggingface/`` export — is the actor worker's, so SFT and RL train the same code.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlcore.api import ActorRolloutRefWorker, Batch, ModelOutput, UpdateSettings, agg_loss, cpu_batch, ppo_update

#: the temperature of the validation's greedy check (see :meth:`SFTWorker.eval_loss`)
GREEDY_TEMPERATURE = 1e-3


class SFTWorker(ActorRolloutRefWorker):
    """One rank of an SFT run (see the module docstring)."""

    ROLES = ("actor",)

    def train_batch(self, batch: Batch) -> Batch:
        """One optimizer step on this rank's sequences: the token-mean negative log-likelihood of the
        ``response_mask`` tokens over the whole global batch. Returns an empty Batch whose
        ``meta["metrics"]`` holds ``train/loss`` (that mean, before the step), ``train/grad_norm``,
        ``train/lr`` (the rate the step used) and ``train/grad_norm_nonfinite``."""
        actor = self._actor_engine("train_batch")
        totals = {"nll": 0.0, "tokens": 0.0}

        def objective(micro: Batch, output: ModelOutput) -> tuple[torch.Tensor, dict[str, float]]:
            """The micro-batch's token-mean NLL; its sum and token count are kept for ``train/loss``."""
            mask = micro["response_mask"]
            nll = -output.require("log_probs")
            totals["nll"] += float((nll.detach() * mask).sum())
            totals["tokens"] += float(mask.sum())
            return agg_loss(nll, mask, "token-mean"), {}

        settings = UpdateSettings(
            sizes=self._require("actor", "train_batch", self.update_sizes),
            epochs=1,
            grad_clip=self.actor_config.grad_clip,
            loss_agg_mode="token-mean",
            prefix="train",
            budget=self.update_budget,
            budget_key="data.max_token_len_per_gpu",
        )
        with actor.resident():
            metrics = ppo_update(actor, cpu_batch(batch), objective, settings)
        nll = actor.all_reduce_sum(totals["nll"])
        tokens = actor.all_reduce_sum(totals["tokens"])
        metrics["train/loss"] = nll / tokens if tokens else float("nan")
        metrics["train/lr"] = actor.lr_scheduler_step()
        return Batch.from_dict({}, meta={"metrics": metrics})

    def eval_loss(self, batch: Batch) -> Batch:
        """Validation sums over every rank's part of ``batch``, without gradients, in ``meta["metrics"]``:
        ``val/nll_sum`` and ``val/tokens``, the summed NLL and count of ``response_mask`` tokens; ``val/rows``,
        the rows with such tokens, and ``val/greedy_rows``, those whose every response token is the model's
        most likely next token — the rows greedy decoding reproduces exactly.

        The greedy check is a second forward pass at :data:`GREEDY_TEMPERATURE`: there a token's probability
        is above one half when its logit beats every other one by more than ``GREEDY_TEMPERATURE * ln(vocab)``
        (under 0.01), and never when another logit is as high, so no engine needs to return logits."""
        actor = self._actor_engine("eval_loss")
        micro = self.update_sizes.micro if self.update_sizes else None
        budget_key = "data.max_token_len_per_gpu"
        batch.meta["temperature"] = 1.0
        log_probs, _ = self._log_probs(actor, batch, micro, self.update_budget, budget_key, with_entropy=False)
        batch.meta["temperature"] = GREEDY_TEMPERATURE
        sharp, _ = self._log_probs(actor, batch, micro, self.update_budget, budget_key, with_entropy=False)
        mask = batch["response_mask"].bool()
        rows = mask.any(dim=1)
        greedy = ((sharp > -math.log(2.0)) | ~mask).all(dim=1) & rows
        metrics: dict[str, Any] = {
            "val/nll_sum": actor.all_reduce_sum(float((-log_probs * mask).sum())),
            "val/tokens": actor.all_reduce_sum(float(mask.sum())),
            "val/rows": actor.all_reduce_sum(float(rows.sum())),
            "val/greedy_rows": actor.all_reduce_sum(float(greedy.sum())),
        }
        return Batch.from_dict({}, meta={"metrics": metrics})
