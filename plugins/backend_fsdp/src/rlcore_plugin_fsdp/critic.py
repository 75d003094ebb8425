"""The critic worker: a value model (decoder backbone + scalar head) trained with the clipped value loss."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig
from torch import nn

from rlcore.algos.functional import masked_mean
from rlcore.algos.losses import check_loss_agg_mode, value_loss
from rlcore.errors import RLCoreError
from rlcore.protocol import Batch
from rlcore_plugin_fsdp.base import (
    FSDPWorkerBase,
    enable_activation_checkpointing,
    load_pretrained,
    positive_int,
    ppo_batch_sizes,
    reject_unsupported,
    select,
    step_scheduler,
    to_device,
    token_budget,
)
from rlcore_plugin_fsdp.dynamic_batch import plan_micro_batches
from rlcore_plugin_fsdp.fsdp import Offloader, apply_fsdp2, resolve_fsdp_config
from rlcore_plugin_fsdp.optim import build_lr_scheduler, build_optimizer
from rlcore_plugin_fsdp.packing import pack_batch

#: the switch for sequence packing in the critic's passes
REMOVE_PADDING_KEY = "critic.model.use_remove_padding"


class ValueModel(nn.Module):
    """A transformer backbone (``AutoModel``, no LM head) with a zero-initialised ``Linear(hidden, 1)`` head.

    Works for any decoder ``AutoModel`` loads (unlike ``AutoModelForTokenClassification``, which not every
    architecture has); the zero head makes every initial value 0.
    """

    def __init__(self, backbone: nn.Module) -> None:
        """Wrap ``backbone`` and add the value head in the backbone's dtype."""
        super().__init__()
        self.backbone = backbone
        self.config = backbone.config
        hidden = backbone.config.get_text_config().hidden_size
        dtype = next(backbone.parameters()).dtype
        self.value_head = nn.Linear(hidden, 1, dtype=dtype)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor,
        keep_last: int = 0,
        keep_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Values ``[B, T, 1]`` of every position, of the last ``keep_last`` positions when it is > 0, or
        of the positions ``keep_index`` (along the sequence) when it is given.

        ``attention_mask`` is None for a packed row (:mod:`rlcore_plugin_fsdp.packing`). A module wrapped
        by FSDP2 must not return a view, so the trailing dimension is kept (no ``squeeze``) and the bias is
        added out of place (``Linear`` on a contiguous 3-D input returns a view of its matmul).
        """
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        if keep_index is not None:
            hidden = hidden[:, keep_index]
        elif keep_last:
            hidden = hidden[:, -keep_last:]
        return nn.functional.linear(hidden, self.value_head.weight) + self.value_head.bias


def response_values(model: nn.Module, batch: Batch, *, remove_padding: bool = False) -> torch.Tensor:
    """Float32 values ``[B, R]`` at positions ``P−1 … P+R−2`` (the states before each response token).

    With ``remove_padding`` the batch runs packed into one row (:func:`rlcore_plugin_fsdp.packing.pack_batch`)
    and response positions outside the attention mask get 0.
    """
    if remove_padding:
        packed = pack_batch(batch, REMOVE_PADDING_KEY)
        values = model(packed.input_ids, None, packed.position_ids, keep_index=packed.keep_index)
        return packed.unpack(values[0, :, 0].float())
    length = batch["responses"].shape[1]
    values = model(batch["input_ids"], batch["attention_mask"], batch["position_ids"], keep_last=length + 1)
    return values[:, :-1, 0].float()


class CriticWorker(FSDPWorkerBase):
    """The critic (role ``critic``): an FSDP2 :class:`ValueModel` of ``critic.model.path`` with AdamW."""

    ROLES = ("critic",)

    def __init__(self, config: DictConfig, role: str = "critic", rank: int = 0, world_size: int = 1) -> None:
        """Validate the critic config and set up the process group; call :meth:`init_model` next."""
        super().__init__(config, role, rank, world_size)

    def configure(self) -> None:
        """Validate the ``critic`` section: unsupported features, batch sizes, ``fsdp_config``."""
        config, world_size = self.config, self.world_size
        if not select(config, "critic.model.path"):
            raise RLCoreError("critic.model.path is not set (it defaults to actor_rollout_ref.model.path)")
        self.critic_config = config.critic
        self.fsdp_config = resolve_fsdp_config(self.critic_config.get("fsdp_config"), "critic.fsdp_config")
        reject_unsupported(config, [("critic.ulysses_sequence_parallel_size", 1)])
        self.remove_padding = bool(select(config, REMOVE_PADDING_KEY, False))
        self.update_budget = token_budget(config, "critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu")
        self.forward_budget = token_budget(config, "critic.use_dynamic_bsz", "critic.forward_max_token_len_per_gpu")
        self.mini_batch_size, self.micro_batch_size = ppo_batch_sizes(
            config,
            "critic",
            world_size,
            mini_key="ppo_mini_batch_size",
            micro_key="ppo_micro_batch_size_per_gpu",
            legacy_micro_key="ppo_micro_batch_size",
        )
        forward_micro = select(
            config, "critic.forward_micro_batch_size_per_gpu", select(config, "critic.ppo_micro_batch_size_per_gpu")
        )
        self.forward_micro_batch_size = None if forward_micro is None else positive_int(
            forward_micro, "critic.forward_micro_batch_size_per_gpu"
        )
        self.loss_agg_mode = check_loss_agg_mode(
            self.critic_config.get("loss_agg_mode", "token-mean"), "critic.loss_agg_mode"
        )
        self.cliprange_value = float(self.critic_config.get("cliprange_value", 0.5))
        self.critic_module: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.shuffle_generator: torch.Generator | None = None
        self._offloader: Offloader | None = None

    def init_model(self) -> None:
        """Build the FSDP2 value model, AdamW (``critic.optim``) and its LR schedule."""
        from transformers import AutoModel

        model_config = self.critic_config.model
        backbone = load_pretrained(AutoModel, model_config, "critic.model", self.fsdp_config["model_dtype"])
        if model_config.get("enable_gradient_checkpointing", False):
            enable_activation_checkpointing(backbone)
        mesh = self._mesh(self.fsdp_config, "critic.fsdp_config")
        self.critic_module = apply_fsdp2(ValueModel(backbone), mesh, self.fsdp_config, self.device)
        self.optimizer = build_optimizer(self.critic_module.parameters(), self.critic_config.optim, "critic.optim")
        self.lr_scheduler = build_lr_scheduler(self.optimizer, self.critic_config.optim, "critic.optim")
        if self.critic_config.get("shuffle", False):
            seed = int(select(self.config, "actor_rollout_ref.actor.data_loader_seed", 42))
            self.shuffle_generator = torch.Generator().manual_seed(seed)
        self._offloader = Offloader(self.critic_module, self.optimizer, self.fsdp_config, self.device)
        self._offloader.offload()

    def _check_ready(self, method: str) -> None:
        """Raise when ``method`` is called before :meth:`init_model`."""
        if self.critic_module is None:
            raise RLCoreError(f"{method}() called before init_model()")

    def compute_values(self, batch: Batch) -> Batch:
        """``values`` ``[B, R]`` (zero outside ``response_mask``), in micro-batches of
        ``critic.forward_micro_batch_size_per_gpu`` (default ``ppo_micro_batch_size_per_gpu``, else all) or,
        with ``critic.use_dynamic_bsz``, of at most ``critic.forward_max_token_len_per_gpu`` tokens."""
        self._check_ready("compute_values")
        model = self.critic_module
        parts = []
        with self._offloader, torch.no_grad():
            model.eval()
            plan = plan_micro_batches(
                to_device(batch, self.device),
                size=self.forward_micro_batch_size,
                budget=self.forward_budget,
                budget_key="critic.forward_max_token_len_per_gpu",
                device=self.device,
            )
            for micro in plan.parts:
                values = response_values(model, micro, remove_padding=self.remove_padding)
                parts.append(values * micro["response_mask"])
            model.train()
        return Batch.from_dict({"values": plan.restore(parts).cpu()})

    def update_critic(self, batch: Batch) -> Batch:
        """One critic update (keys ``values``, ``returns``, ``response_mask`` + inputs); returns an empty
        Batch whose ``meta["metrics"]`` holds ``critic/vf_loss``, ``critic/vf_clipfrac``,
        ``critic/vpred_mean``, ``critic/grad_norm``, ``critic/grad_norm_nonfinite`` and ``critic/lr``."""
        self._check_ready("update_critic")
        model = self.critic_module

        def loss_step(micro: Batch) -> tuple[torch.Tensor, dict[str, float]]:
            """The clipped value loss of one micro-batch and its metrics."""
            vpreds = response_values(model, micro, remove_padding=self.remove_padding)
            mask = micro["response_mask"]
            loss, clipfrac = value_loss(
                vpreds, micro["returns"], micro["values"], mask, self.cliprange_value, self.loss_agg_mode
            )
            metrics = {
                "critic/vf_loss": loss.detach().item(),
                "critic/vf_clipfrac": float(clipfrac),
                "critic/vpred_mean": masked_mean(vpreds.detach(), mask).item(),
            }
            return loss, metrics

        with self._offloader:
            metrics = self._ppo_update(
                to_device(batch, self.device),
                model=model,
                optimizer=self.optimizer,
                mini_size=self.mini_batch_size,
                micro_size=self.micro_batch_size,
                epochs=int(self.critic_config.get("ppo_epochs", 1)),
                grad_clip=self.critic_config.get("grad_clip", None),
                generator=self.shuffle_generator,
                loss_step=loss_step,
                prefix="critic",
                loss_agg_mode=self.loss_agg_mode,
                budget=self.update_budget,
                budget_key="critic.ppo_max_token_len_per_gpu",
            )
        metrics["critic/lr"] = float(self.lr_scheduler.get_last_lr()[0])
        step_scheduler(self.lr_scheduler)
        return Batch.from_dict({}, meta={"metrics": metrics})

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the critic's checkpoint into the directory ``path`` (the controller passes
        ``global_step_N/critic``): the sharded value model and optimizer, and per rank the LR schedule,
        shuffle generator and RNG states, as ``critic.checkpoint.save_contents`` says. Every rank must
        call this."""
        self._check_ready("save_checkpoint")
        extra = {"lr_scheduler": self.lr_scheduler.state_dict()}
        if self.shuffle_generator is not None:
            extra["shuffle_generator"] = self.shuffle_generator.get_state()
        with self._offloader:
            self._save_state(
                Path(path),
                model=self.critic_module,
                optimizer=self.optimizer,
                extra=extra,
                contents=self._contents(self.config, "critic", "save_contents"),
            )

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote into ``path`` (per ``critic.checkpoint.load_contents``)."""
        self._check_ready("load_checkpoint")
        with self._offloader:
            extra = self._load_state(
                Path(path),
                model=self.critic_module,
                optimizer=self.optimizer,
                contents=self._contents(self.config, "critic", "load_contents"),
                key="critic.checkpoint.load_contents",
            )
        if extra is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
            if self.shuffle_generator is not None and "shuffle_generator" in extra:
                self.shuffle_generator.set_state(extra["shuffle_generator"])
