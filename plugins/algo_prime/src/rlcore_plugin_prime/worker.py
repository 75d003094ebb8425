"""PRIME's implicit process reward model (PRM): a causal LM φ trained online, with a frozen reference.

The token reward of response token y_t is r_t = β·(log π_φ(y_t | prefix) − log π_ref(y_t | prefix))
(``reward_model.model.beta_train``). The PRM is trained with the cross-entropy of σ(Σ_t r_t) against the
response's outcome label ``acc`` (the rule score: ``reward_model.model.loss_type=ce``), before or after
scoring each batch (``reward_model.model.update``), one optimizer step per ``reward_model.mini_batch_size``
prompts, with ``reward_model.optim``. Both models start from ``reward_model.model.path`` (default: the
policy, ``actor_rollout_ref.model.path``) and run on the backend of ``reward_model.strategy``.
``reward_model.prime_granularity=whole`` puts Σ_t r_t on the last token; ``reward_model.prime_norm=batch_norm``
divides the rewards by the largest |reward-to-go| of the batch.
"""

from __future__ import annotations

import copy

import torch
from omegaconf import DictConfig, OmegaConf

from rlcore.api import (
    Batch,
    ModelOutput,
    RLCoreError,
    TrainingEngine,
    UpdateBatchSizes,
    UpdateSettings,
    WorkerBase,
    cpu_batch,
    data_parallel_size,
    plan_micro_batches,
    positive_int,
    ppo_update,
    select,
)

RM = "reward_model"
#: the accepted values of the PRIME keys
CHOICES: dict[str, tuple[str, ...]] = {
    f"{RM}.model.update": ("before", "after", "none"),
    f"{RM}.model.loss_type": ("ce",),
    f"{RM}.model.ref_type": ("freeze",),
    f"{RM}.prime_granularity": ("token", "whole"),
    f"{RM}.prime_norm": ("batch_norm", "none"),
}


def implicit_rewards(q: torch.Tensor, mask: torch.Tensor, beta: float, granularity: str, norm: str) -> torch.Tensor:
    """``[B, R]`` PRIME rewards from the log-ratios ``q`` = log π_φ − log π_ref (see the module docstring)."""
    rewards = beta * q * mask
    if granularity == "whole":
        length = mask.sum(-1).long()
        whole = torch.zeros_like(rewards)
        rows = torch.nonzero(length > 0).squeeze(-1)
        whole[rows, length[rows] - 1] = rewards.sum(-1)[rows]
        rewards = whole
    if norm == "batch_norm":
        to_go = rewards.flip(-1).cumsum(-1).flip(-1)
        rewards = rewards / (to_go.abs().max() + 1e-6)
    return rewards


class PrimeRewardModelWorker(WorkerBase):
    """The implicit PRM (role ``reward_model``): a trainable ``actor`` engine and a frozen ``ref`` engine."""

    ROLES = (RM,)
    #: the run's config (:meth:`configure` may replace it by a copy with the PRM's model path filled in)
    config: DictConfig

    def configure(self) -> None:
        """Validate the PRIME keys and the PRM's batch sizes; default the PRM to the policy's weights."""
        if not select(self.config, f"{RM}.model.path"):
            self.config = copy.deepcopy(self.config)
            OmegaConf.update(self.config, f"{RM}.model.path", select(self.config, "actor_rollout_ref.model.path"))
        config = self.config
        for key, allowed in CHOICES.items():
            value = select(config, key)
            if value not in allowed:
                raise RLCoreError(f"{key}={value!r} is not supported by PRIME here; use one of {', '.join(allowed)}")
        self.update_mode = str(select(config, f"{RM}.model.update"))
        self.beta = float(select(config, f"{RM}.model.beta_train"))
        self.granularity = str(select(config, f"{RM}.prime_granularity"))
        self.norm = str(select(config, f"{RM}.prime_norm"))
        self.sizes = self._update_sizes(config)
        micro = select(config, f"{RM}.micro_batch_size_per_gpu")
        self.micro = None if micro is None else positive_int(micro, f"{RM}.micro_batch_size_per_gpu")
        self._check_engine_config("actor", RM, f"{RM}.model")
        self.prm: TrainingEngine | None = None
        self.ref: TrainingEngine | None = None

    def _update_sizes(self, config: DictConfig) -> UpdateBatchSizes:
        """Per-rank responses per PRM optimizer step (``mini_batch_size`` prompts × n) and per micro-batch."""
        n = positive_int(select(config, "actor_rollout_ref.rollout.n", 1), "actor_rollout_ref.rollout.n")
        mini_key, micro_key = f"{RM}.mini_batch_size", f"{RM}.micro_batch_size_per_gpu"
        dp = data_parallel_size(config, RM, self.world_size)
        responses = positive_int(select(config, mini_key), mini_key) * n
        if responses % dp:
            raise RLCoreError(
                f"{mini_key} × rollout.n = {responses} responses must divide over {dp} data-parallel ranks"
            )
        mini = responses // dp
        micro = select(config, micro_key)
        if micro is None:
            return UpdateBatchSizes(mini, mini, micro_from_default=True)
        micro = positive_int(micro, micro_key)
        if mini % micro:
            raise RLCoreError(
                f"the PRM's per-rank mini-batch ({mini} responses) must be divisible by {micro_key} ({micro})"
            )
        return UpdateBatchSizes(mini, micro)

    def init_model(self) -> None:
        """Build the PRM (with its optimizer) and its frozen reference, both from ``reward_model.model.path``."""
        self.prm = self._create_engine("actor", RM, f"{RM}.model")
        self.ref = self._create_engine("ref", RM, f"{RM}.model")

    def _engines(self) -> tuple[TrainingEngine, TrainingEngine]:
        if self.prm is None or self.ref is None:
            raise RLCoreError("compute_rm_score() called before init_model()")
        return self.prm, self.ref

    def _log_probs(self, engine: TrainingEngine, batch: Batch) -> torch.Tensor:
        """The engine's response log-probs, in micro-batches."""
        plan = plan_micro_batches(batch, size=self.micro, device=engine.device)
        with engine.resident():
            outputs = engine.forward(plan.parts, temperature=1.0, with_entropy=False)
        return plan.restore([out.require("log_probs").cpu() for out in outputs])

    def _update(self, batch: Batch) -> dict[str, float]:
        """One pass of PRM updates on ``batch`` (it holds ``acc`` and ``prm_ref_log_prob``)."""
        prm, _ = self._engines()
        beta = self.beta

        def objective(micro: Batch, output: ModelOutput) -> tuple[torch.Tensor, dict[str, float]]:
            """Cross-entropy of σ(β·Σ q) against the outcome labels, averaged over the micro-batch's responses."""
            mask = micro["response_mask"].to(torch.float32)
            logit = beta * ((output.require("log_probs") - micro["prm_ref_log_prob"]) * mask).sum(-1)
            labels = micro["acc"].to(logit.dtype)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, labels)
            correct = ((logit.detach() > 0) == (labels > 0.5)).float().mean()
            return loss, {"reward_model/dpo_loss": loss.detach().item(), "reward_model/dpo_acc": correct.item()}

        grad_clip = select(self.config, f"{RM}.optim.clip_grad")
        settings = UpdateSettings(
            sizes=self.sizes, epochs=1, grad_clip=grad_clip, loss_agg_mode="seq-mean-token-mean", prefix=RM
        )
        with prm.resident():
            metrics = ppo_update(prm, batch, objective, settings)
        metrics[f"{RM}/lr"] = prm.lr_scheduler_step()
        return metrics

    def compute_rm_score(self, batch: Batch) -> Batch:
        """``rm_scores`` ``[B, R]``: PRIME's token rewards; trains the PRM on the batch's ``acc`` before or after
        scoring (``reward_model.model.update``; never on validation batches). ``meta["metrics"]`` holds
        ``reward_model/dpo_loss``, ``reward_model/dpo_acc``, ``reward_model/grad_norm`` and ``reward_model/lr``
        of the update, and ``reward_model/implicit_reward_mean``."""
        prm, ref = self._engines()
        data = cpu_batch(batch).select(["input_ids", "attention_mask", "position_ids", "responses", "response_mask"])
        mask = data["response_mask"].to(torch.float32)
        data["prm_ref_log_prob"] = self._log_probs(ref, data)
        train = self.update_mode != "none" and not batch.meta.get("validate", False)
        if train:
            if "acc" not in batch:
                raise RLCoreError("PRIME trains its PRM on outcome labels, but the batch has no 'acc' column")
            data["acc"] = batch["acc"].float()
        metrics: dict[str, float] = {}
        if train and self.update_mode == "before":
            metrics.update(self._update(data))
        q = (self._log_probs(prm, data) - data["prm_ref_log_prob"]) * mask
        rewards = implicit_rewards(q, mask, self.beta, self.granularity, self.norm)
        if train and self.update_mode == "after":
            metrics.update(self._update(data))
        metrics[f"{RM}/implicit_reward_mean"] = float((self.beta * q).sum(-1).mean())
        return Batch.from_dict({"rm_scores": rewards}, meta={"metrics": metrics})
