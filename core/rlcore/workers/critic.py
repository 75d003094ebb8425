"""The critic worker: a value model on any training backend, trained with the clipped value loss."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig

from rlcore.algos.functional import masked_mean
from rlcore.algos.losses import value_loss
from rlcore.api.batch import Batch
from rlcore.api.training import ModelOutput, TrainingEngine
from rlcore.config.batch_sizes import data_parallel_size, forward_micro_batch_size, ppo_batch_sizes, token_budget
from rlcore.errors import RLCoreError
from rlcore.workers.base import WorkerBase, cpu_batch
from rlcore.workers.micro_batches import plan_micro_batches
from rlcore.workers.ppo_loop import UpdateSettings, ppo_update


class CriticWorker(WorkerBase):
    """The critic (role ``critic``): the backend's value-model engine of ``critic.model.path``."""

    ROLES = ("critic",)
    MODEL_SECTIONS = ("critic.model",)

    def __init__(self, config: DictConfig, role: str = "critic", rank: int = 0, world_size: int = 1) -> None:
        """Validate the critic config and set up the process group; call :meth:`init_model` next."""
        super().__init__(config, role, rank, world_size)

    def configure(self) -> None:
        """Validate the ``critic`` section: model path, batch sizes, token budgets and the loss mode."""
        critic = self.critic_config = self.sections.critic
        if not critic.model.path:
            raise RLCoreError("critic.model.path is not set (it defaults to actor_rollout_ref.model.path)")
        dp_size = data_parallel_size(self.config, "critic", self.world_size)
        self.update_budget = token_budget(critic, "use_dynamic_bsz", "ppo_max_token_len_per_gpu")
        self.forward_budget = token_budget(critic, "use_dynamic_bsz", "forward_max_token_len_per_gpu")
        self.update_sizes = ppo_batch_sizes(critic, self.sections.actor_rollout_ref.rollout.n, dp_size)
        self._check_engine_config("critic", "critic", "critic.model")
        self.forward_micro_batch_size = forward_micro_batch_size(
            critic, "forward_micro_batch_size_per_gpu", "forward_micro_batch_size", dp_size
        )
        self.loss_agg_mode = critic.loss_agg_mode
        self.loss_scale_factor = critic.loss_scale_factor
        self.cliprange_value = float(critic.cliprange_value)
        self.critic: TrainingEngine | None = None
        self.shuffle_generator: torch.Generator | None = None

    def init_model(self) -> None:
        """Build the value-model engine (with its optimizer and LR schedule) and the shuffling generator."""
        self.critic = self._create_engine("critic", "critic", "critic.model")
        if self.critic_config.shuffle:
            seed = int(self.sections.actor_rollout_ref.actor.data_loader_seed)
            self.shuffle_generator = torch.Generator().manual_seed(seed)

    def _engine(self, method: str) -> TrainingEngine:
        """The critic engine; raises when ``method`` is called before :meth:`init_model`."""
        if self.critic is None:
            raise RLCoreError(f"{method}() called before init_model()")
        return self.critic

    def compute_values(self, batch: Batch) -> Batch:
        """``values`` ``[B, R]`` (zero outside ``response_mask``), in micro-batches of
        ``critic.forward_micro_batch_size_per_gpu`` (default ``ppo_micro_batch_size_per_gpu``, else all) or,
        with ``critic.use_dynamic_bsz``, of at most ``critic.forward_max_token_len_per_gpu`` tokens."""
        engine = self._engine("compute_values")
        plan = plan_micro_batches(
            cpu_batch(batch),
            size=self.forward_micro_batch_size,
            budget=self.forward_budget,
            budget_key="critic.forward_max_token_len_per_gpu",
            device=engine.device,
        )
        with engine.resident():
            outputs = engine.forward(plan.parts, temperature=1.0, with_entropy=False)
        values = [
            out.require("values").cpu() * micro["response_mask"] for out, micro in zip(outputs, plan.parts, strict=True)
        ]
        return Batch.from_dict({"values": plan.restore(values)})

    def update_critic(self, batch: Batch) -> Batch:
        """One critic update (keys ``values``, ``returns``, ``response_mask`` + inputs); returns an empty
        Batch whose ``meta["metrics"]`` holds ``critic/vf_loss``, ``critic/vf_clipfrac``,
        ``critic/vpred_mean``, ``critic/grad_norm``, ``critic/grad_norm_nonfinite`` and ``critic/lr``."""
        engine = self._engine("update_critic")

        def objective(micro: Batch, output: ModelOutput) -> tuple[torch.Tensor, dict[str, float]]:
            """The clipped value loss of one micro-batch and its metrics."""
            vpreds, mask = output.require("values"), micro["response_mask"]
            loss, clipfrac = value_loss(
                vpreds,
                micro["returns"],
                micro["values"],
                mask,
                self.cliprange_value,
                self.loss_agg_mode,
                self.loss_scale_factor,
            )
            metrics = {
                "critic/vf_loss": loss.detach().item(),
                "critic/vf_clipfrac": float(clipfrac),
                "critic/vpred_mean": masked_mean(vpreds.detach(), mask).item(),
            }
            return loss, metrics

        settings = UpdateSettings(
            sizes=self.update_sizes,
            epochs=int(self.critic_config.ppo_epochs),
            grad_clip=self.critic_config.grad_clip,
            loss_agg_mode=self.loss_agg_mode,
            prefix="critic",
            budget=self.update_budget,
            budget_key="critic.ppo_max_token_len_per_gpu",
        )
        with engine.resident():
            metrics = ppo_update(engine, cpu_batch(batch), objective, settings, self.shuffle_generator)
        metrics["critic/lr"] = engine.lr_scheduler_step()
        return Batch.from_dict({}, meta={"metrics": metrics})

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the critic's checkpoint into the directory ``path`` (the controller passes
        ``global_step_N/critic``): the engine's sharded value model and optimizer, and per rank its LR
        schedule, the shuffle generator and RNG states, as ``critic.checkpoint.save_contents`` says. Every
        rank must call this."""
        engine = self._engine("save_checkpoint")
        extra = {}
        if self.shuffle_generator is not None:
            extra["shuffle_generator"] = self.shuffle_generator.get_state()
        with engine.resident():
            self._save_state(Path(path), engine, extra, self.critic_config.checkpoint.save_contents)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote into ``path`` (per ``critic.checkpoint.load_contents``)."""
        engine = self._engine("load_checkpoint")
        contents = self.critic_config.checkpoint.load_contents
        with engine.resident():
            extra = self._load_state(Path(path), engine, contents, "critic.checkpoint.load_contents")
        if extra is not None and self.shuffle_generator is not None and "shuffle_generator" in extra:
            self.shuffle_generator.set_state(extra["shuffle_generator"])
