"""The actor/rollout/reference worker: one process (rank) of the policy side of a run."""

from __future__ import annotations

import inspect
import logging
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from rlcore.algos.functional import entropy_from_logits, logprobs_from_logits
from rlcore.algos.losses import agg_loss, build_actor_loss
from rlcore.errors import RLCoreError
from rlcore.protocol import Batch
from rlcore.registry import UnknownComponentError
from rlcore.rollout.hf import state_checksum
from rlcore_plugin_fsdp.base import (
    FSDPWorkerBase,
    enable_activation_checkpointing,
    inference_micro_batch_size,
    load_pretrained,
    ppo_batch_sizes,
    reject_unsupported,
    select,
    step_scheduler,
    to_device,
    token_budget,
)
from rlcore_plugin_fsdp.dynamic_batch import plan_micro_batches
from rlcore_plugin_fsdp.fsdp import Offloader, apply_fsdp2, parse_dtype, resolve_fsdp_config
from rlcore_plugin_fsdp.lora import LoraMerger, apply_lora, lora_settings
from rlcore_plugin_fsdp.optim import build_lr_scheduler, build_optimizer
from rlcore_plugin_fsdp.packing import pack_batch

ARR = "actor_rollout_ref"
#: role -> (has actor, has rollout engine, has reference model)
ROLE_PARTS: dict[str, tuple[bool, bool, bool]] = {
    "actor_rollout_ref": (True, True, True),
    "actor_rollout": (True, True, False),
    "actor": (True, False, False),
    "actor_ref": (True, False, True),
    "rollout": (False, True, False),
    "ref": (False, False, True),
}
logger = logging.getLogger(__name__)

#: largest relative difference between the trainer's and the rollout engine's weight checksums
WEIGHT_SYNC_RTOL = 1e-6
#: the probe sequence whose log-probs the trainer and the rollout engine compare after every weight sync
WEIGHT_SYNC_PROBE_TEXT = "Weight sync probe: 12 + 30 = 42, and the quick brown fox jumps over the lazy dog."
#: the switch for sequence packing in the actor, reference and log-prob passes
REMOVE_PADDING_KEY = f"{ARR}.model.use_remove_padding"


class WeightSyncError(RLCoreError):
    """The rollout engine does not serve the weights the trainer just pushed."""


def accepts_logits_to_keep(model: nn.Module) -> bool:
    """Whether ``model.forward`` can project only some positions to the vocabulary (``logits_to_keep``)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def response_log_probs(
    model: nn.Module, batch: Batch, temperature: float, *, with_entropy: bool, remove_padding: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Teacher-forced log-probs (and entropies) of ``batch["responses"]`` under ``model``, both ``[B, R]``.

    The logits at positions ``P−1 … P+R−2`` predict the ``R`` response tokens; they are divided by
    ``temperature`` before the softmax so that they describe the distribution the rollout sampled from.
    Only those positions are projected to the vocabulary when the model supports ``logits_to_keep``.

    With ``remove_padding`` the batch runs packed into one row without padding
    (:func:`rlcore_plugin_fsdp.packing.pack_batch`); response positions that are not attended then get 0.
    Without it they hold whatever the padded forward gives. Either way only positions inside the
    attention mask are meaningful.
    """
    keep = accepts_logits_to_keep(model)
    if remove_padding:
        packed = pack_batch(batch, REMOVE_PADDING_KEY)
        kwargs: dict[str, Any] = {"logits_to_keep": packed.keep_index} if keep else {}
        logits = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False, **kwargs).logits
        logits = (logits[0] if keep else logits[0, packed.keep_index]).float() / temperature
        log_probs = packed.unpack(logprobs_from_logits(logits, batch["responses"][packed.rows, packed.cols]))
        return log_probs, packed.unpack(entropy_from_logits(logits)) if with_entropy else None
    length = batch["responses"].shape[1]
    kwargs = {
        "input_ids": batch["input_ids"],
        "attention_mask": batch["attention_mask"],
        "position_ids": batch["position_ids"],
        "use_cache": False,
    }
    if keep:
        kwargs["logits_to_keep"] = length + 1
    logits = model(**kwargs).logits
    logits = logits[:, :-1] if keep else logits[:, -length - 1 : -1]
    logits = logits.float() / temperature
    log_probs = logprobs_from_logits(logits, batch["responses"])
    return log_probs, entropy_from_logits(logits) if with_entropy else None


class ActorRolloutRefWorker(FSDPWorkerBase):
    """The policy worker: FSDP2 actor with AdamW, frozen reference model and a rollout engine, by role.

    Roles: ``actor_rollout_ref`` (all three, the hybrid default), ``actor_rollout``, ``actor``,
    ``actor_ref`` (split placement), ``rollout`` and ``ref``. Methods that need a part the role lacks raise
    :class:`RLCoreError`.
    """

    ROLES = tuple(ROLE_PARTS)

    def configure(self) -> None:
        """Validate the config for this role: unsupported features, batch sizes, ``fsdp_config`` sections."""
        config, world_size = self.config, self.world_size
        if not select(config, f"{ARR}.model.path"):
            raise RLCoreError(f"{ARR}.model.path is not set: give a Hugging Face model directory or hub name")
        self.has_actor, self.has_rollout, self.has_ref = ROLE_PARTS[self.role]
        self.actor_config = config.actor_rollout_ref.actor
        self.rollout_config = config.actor_rollout_ref.rollout
        self.actor_fsdp = resolve_fsdp_config(self.actor_config.get("fsdp_config"), f"{ARR}.actor.fsdp_config")
        self.ref_fsdp = resolve_fsdp_config(config.actor_rollout_ref.ref.get("fsdp_config"), f"{ARR}.ref.fsdp_config")
        reject_unsupported(
            config,
            [(f"{ARR}.actor.ulysses_sequence_parallel_size", 1), (f"{ARR}.ref.ulysses_sequence_parallel_size", 1)],
        )
        self.remove_padding = bool(select(config, REMOVE_PADDING_KEY, False))
        self.lora = lora_settings(config.actor_rollout_ref.model, f"{ARR}.model")
        self.update_budget = token_budget(
            config, f"{ARR}.actor.use_dynamic_bsz", f"{ARR}.actor.ppo_max_token_len_per_gpu"
        )
        self.log_prob_budget = token_budget(
            config, f"{ARR}.rollout.log_prob_use_dynamic_bsz", f"{ARR}.rollout.log_prob_max_token_len_per_gpu"
        )
        self.ref_budget = token_budget(
            config, f"{ARR}.ref.log_prob_use_dynamic_bsz", f"{ARR}.ref.log_prob_max_token_len_per_gpu"
        )
        if self.has_actor:
            self.mini_batch_size, self.micro_batch_size = ppo_batch_sizes(
                config,
                f"{ARR}.actor",
                world_size,
                mini_key="ppo_mini_batch_size",
                micro_key="ppo_micro_batch_size_per_gpu",
                legacy_micro_key="ppo_micro_batch_size",
            )
        self.log_prob_micro_batch_size = inference_micro_batch_size(config, f"{ARR}.rollout", world_size)
        self.ref_micro_batch_size = inference_micro_batch_size(config, f"{ARR}.ref", world_size)
        self.tokenizer: Any = None
        self.actor_module: nn.Module | None = None
        self.ref_module: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.lr_scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.rollout_engine: Any = None
        self._warned_unverified = False
        self.loss_fn: Any = None
        self.shuffle_generator: torch.Generator | None = None
        self._offloader: Offloader | None = None
        self._ref_offloader: Offloader | None = None
        self._lora_merger: LoraMerger | None = None
        self._rollout_dtype = self.actor_fsdp["model_dtype"]

    # ------------------------------------------------------------------ set-up
    def init_model(self) -> None:
        """Load the tokenizer and, by role, the FSDP2 actor (+ AdamW, LR schedule), the frozen reference
        model and the rollout engine (synced with the actor's weights right away)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model_config = self.config.actor_rollout_ref.model
        tokenizer_path = model_config.get("tokenizer_path", None) or model_config.path
        trust = bool(model_config.get("trust_remote_code", False))
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=trust)
        except (OSError, ValueError) as exc:
            key = "tokenizer_path" if model_config.get("tokenizer_path", None) else "path"
            raise RLCoreError(f"{ARR}.model.{key}={tokenizer_path!r} has no loadable tokenizer: {exc}") from exc
        if model_config.get("custom_chat_template", None):
            self.tokenizer.chat_template = model_config.custom_chat_template
        if self.has_actor:
            self._init_actor(AutoModelForCausalLM)
        if self.has_ref and self.has_actor and self.lora is not None:
            # the reference policy is the actor with its adapters disabled: no second model
            self.ref_module = self.actor_module
            self._ref_offloader = self._offloader
        elif self.has_ref:
            ref = load_pretrained(AutoModelForCausalLM, model_config, f"{ARR}.model", self.ref_fsdp["model_dtype"])
            ref.requires_grad_(False)
            ref.eval()
            mesh = self._mesh(self.ref_fsdp, f"{ARR}.ref.fsdp_config")
            self.ref_module = apply_fsdp2(ref, mesh, self.ref_fsdp, self.device)
            self._ref_offloader = Offloader(self.ref_module, None, self.ref_fsdp, self.device)
            self._ref_offloader.offload()
        if self.has_rollout:
            self._init_rollout()
            if self.has_actor:
                self.sync_weights()

    def _init_actor(self, loader: Any) -> None:
        """Build the trainable actor, its optimizer, LR schedule, loss and shuffling generator."""
        model_config = self.config.actor_rollout_ref.model
        model = load_pretrained(loader, model_config, f"{ARR}.model", self.actor_fsdp["model_dtype"])
        if model_config.get("enable_gradient_checkpointing", False):
            enable_activation_checkpointing(model)
        if self.lora is not None:
            model = apply_lora(model, self.lora, f"{ARR}.model")
            self._lora_merger = LoraMerger.from_model(model)
        mesh = self._mesh(self.actor_fsdp, f"{ARR}.actor.fsdp_config")
        self.actor_module = apply_fsdp2(model, mesh, self.actor_fsdp, self.device)
        # the optimizer must see the sharded parameters: build it before any forward pass
        trainable = [param for param in self.actor_module.parameters() if param.requires_grad]
        self.optimizer = build_optimizer(trainable, self.actor_config.optim, f"{ARR}.actor.optim")
        self.lr_scheduler = build_lr_scheduler(self.optimizer, self.actor_config.optim, f"{ARR}.actor.optim")
        self.loss_fn = build_actor_loss(self.actor_config)
        if self.actor_config.get("shuffle", False):
            self.shuffle_generator = torch.Generator().manual_seed(int(self.actor_config.get("data_loader_seed", 42)))
        self._offloader = Offloader(self.actor_module, self.optimizer, self.actor_fsdp, self.device)
        self._offloader.offload()

    def _init_rollout(self) -> None:
        """Construct the rollout engine named by ``rollout.name`` from the model path."""
        from rlcore.plugins import get_component

        name = self.rollout_config.get("name", "hf")
        try:
            engine_cls = get_component("rollout_engine", name)
        except UnknownComponentError as exc:
            raise UnknownComponentError(f"{ARR}.rollout.name: {exc}") from exc
        if self.device.type == "cuda":
            self._rollout_dtype = parse_dtype(self.rollout_config.get("dtype", "bf16"), f"{ARR}.rollout.dtype")
        else:
            self._rollout_dtype = self.actor_fsdp["model_dtype"]
        self.rollout_engine = engine_cls(
            self.config.actor_rollout_ref.model.path,
            self.tokenizer,
            self.rollout_config,
            device=self.device,
            dtype=self._rollout_dtype,
        )

    def _require(self, part: str, method: str) -> None:
        """Raise when ``method`` needs a part (actor/rollout/ref) this role lacks or that is not built yet."""
        present = {"actor": self.has_actor, "rollout": self.has_rollout, "ref": self.has_ref}[part]
        if not present:
            raise RLCoreError(f"{method}() needs the {part}, but this worker's role is {self.role!r}")
        built = {"actor": self.actor_module, "rollout": self.rollout_engine, "ref": self.ref_module}[part]
        if built is None:
            raise RLCoreError(f"{method}() called before init_model()")

    def _temperature(self, batch: Batch) -> float:
        """The sampling temperature of ``batch`` (``meta["temperature"]``, else ``rollout.temperature``)."""
        temperature = float(batch.meta.get("temperature", self.rollout_config.get("temperature", 1.0)))
        if temperature <= 0:
            raise RLCoreError(
                f"log-probs need a positive sampling temperature ({ARR}.rollout.temperature), got {temperature}"
            )
        return temperature

    def _log_probs(
        self,
        model: nn.Module,
        batch: Batch,
        micro_size: int | None,
        budget: int | None,
        budget_key: str,
        *,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of the whole batch without gradients, in micro-batches of
        ``micro_size`` rows or, with a token ``budget`` (config key ``budget_key``), of balanced token
        counts; the results come back in the batch's row order."""
        temperature = self._temperature(batch)
        log_probs, entropies = [], []
        was_training = model.training
        model.eval()
        plan = plan_micro_batches(
            to_device(batch, self.device), size=micro_size, budget=budget, budget_key=budget_key, device=self.device
        )
        with torch.no_grad():
            for micro in plan.parts:
                lp, ent = response_log_probs(
                    model, micro, temperature, with_entropy=with_entropy, remove_padding=self.remove_padding
                )
                log_probs.append(lp)
                entropies.append(ent)
        model.train(was_training)
        return plan.restore(log_probs).cpu(), plan.restore(entropies).cpu() if with_entropy else None

    # ---------------------------------------------------------------- methods
    def compute_log_prob(self, batch: Batch) -> Batch:
        """``old_log_probs`` and ``entropys`` ``[B, R]`` of the batch's responses under the current actor,
        in micro-batches of ``rollout.log_prob_micro_batch_size_per_gpu`` (or, with
        ``rollout.log_prob_use_dynamic_bsz``, of at most ``rollout.log_prob_max_token_len_per_gpu`` tokens)."""
        self._require("actor", "compute_log_prob")
        with self._offloader:
            log_probs, entropies = self._log_probs(
                self.actor_module,
                batch,
                self.log_prob_micro_batch_size,
                self.log_prob_budget,
                f"{ARR}.rollout.log_prob_max_token_len_per_gpu",
                with_entropy=True,
            )
        return Batch.from_dict({"old_log_probs": log_probs, "entropys": entropies})

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """``ref_log_prob`` ``[B, R]`` under the frozen reference policy, in micro-batches of
        ``ref.log_prob_micro_batch_size_per_gpu`` (or of at most ``ref.log_prob_max_token_len_per_gpu``
        tokens with ``ref.log_prob_use_dynamic_bsz``). With LoRA the reference is the actor with its
        adapters disabled."""
        self._require("ref", "compute_ref_log_prob")
        adapters_off = self.ref_module.disable_adapter() if self._lora_merger is not None else nullcontext()
        with self._ref_offloader, adapters_off:
            log_probs, _ = self._log_probs(
                self.ref_module,
                batch,
                self.ref_micro_batch_size,
                self.ref_budget,
                f"{ARR}.ref.log_prob_max_token_len_per_gpu",
                with_entropy=False,
            )
        return Batch.from_dict({"ref_log_prob": log_probs})

    def update_actor(self, batch: Batch) -> Batch:
        """One PPO update on this rank's responses; returns an empty Batch with ``meta["metrics"]``.

        Mini-batches hold ``ppo_mini_batch_size × rollout.n / world_size`` responses, micro-batches
        ``ppo_micro_batch_size_per_gpu`` (or at most ``ppo_max_token_len_per_gpu`` tokens with
        ``use_dynamic_bsz``); ``ppo_epochs`` passes, optionally shuffled. Losses are normalised over the
        global mini-batch (see :meth:`FSDPWorkerBase._ppo_update`). The LR scheduler steps once per call
        and ``actor/lr`` is the rate this update used. Metrics are python floats averaged over
        micro-batches (``actor/grad_norm`` over the optimizer steps taken).
        """
        self._require("actor", "update_actor")
        temperature = self._temperature(batch)
        with_entropy = float(self.actor_config.get("entropy_coeff", 0.0) or 0.0) != 0.0
        # on-policy (see Trainer._on_policy_update): no compute_log_prob pass ran; the old log-probs are
        # this forward's own, detached (ratio 1), and actor/entropy is measured here
        on_policy = bool(batch.meta.get("on_policy", False))
        agg_mode = self.actor_config.get("loss_agg_mode", "token-mean")
        model = self.actor_module

        def loss_step(micro: Batch) -> tuple[torch.Tensor, dict[str, float]]:
            """The actor loss of one micro-batch and its metrics."""
            log_prob, entropy = response_log_probs(
                model, micro, temperature, with_entropy=with_entropy or on_policy, remove_padding=self.remove_padding
            )
            if not on_policy:
                return self.loss_fn(log_prob, entropy, micro)
            micro["old_log_probs"] = log_prob.detach()
            loss, metrics = self.loss_fn(log_prob, entropy if with_entropy else None, micro)
            entropy_metric = agg_loss(entropy.detach(), micro["response_mask"], agg_mode).item()
            return loss, {**metrics, "actor/entropy": entropy_metric}

        with self._offloader:
            metrics = self._ppo_update(
                to_device(batch, self.device),
                model=model,
                optimizer=self.optimizer,
                mini_size=self.mini_batch_size,
                micro_size=self.micro_batch_size,
                epochs=int(self.actor_config.get("ppo_epochs", 1)),
                grad_clip=self.actor_config.get("grad_clip", None),
                generator=self.shuffle_generator,
                loss_step=loss_step,
                prefix="actor",
                loss_agg_mode=self.actor_config.get("loss_agg_mode", "token-mean"),
                budget=self.update_budget,
                budget_key=f"{ARR}.actor.ppo_max_token_len_per_gpu",
            )
        metrics["actor/lr"] = float(self.lr_scheduler.get_last_lr()[0])
        step_scheduler(self.lr_scheduler)
        return Batch.from_dict({}, meta={"metrics": metrics})

    def shutdown(self) -> None:
        """Stop the rollout engine's own processes (engines that have ``close()``), then the process group."""
        close = getattr(self.rollout_engine, "close", None)
        if close is not None:
            close()
            self.rollout_engine = None
        super().shutdown()

    def generate_sequences(self, batch: Batch) -> Batch:
        """Sample responses with the rollout engine (``meta["validate"]`` selects the validation sampling).

        The engine is woken first and, with ``rollout.free_cache_engine``, put to sleep afterwards so that
        training gets its memory back (engines skip both where there is nothing to free, e.g. on CPU)."""
        self._require("rollout", "generate_sequences")
        self.rollout_engine.wake()
        out = self.rollout_engine.generate(batch, validate=bool(batch.meta.get("validate", False)))
        if self.rollout_config.get("free_cache_engine", True):
            self.rollout_engine.sleep()
        return out

    # ------------------------------------------------------------ weight sync
    def _hf_state_dict(self, options: StateDictOptions) -> dict[str, torch.Tensor]:
        """The actor's gathered state dict with Hugging Face names; with LoRA the merged weights
        ``W + scaling·B·A`` (computed on new tensors: the training model is not modified)."""
        state = get_model_state_dict(self.actor_module, options=options)
        return self._lora_merger.merge(state) if self._lora_merger is not None else state

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The actor's full (unsharded) state dict, with Hugging Face parameter names, on every rank (with
        LoRA: the merged weights)."""
        self._require("actor", "full_state_dict")
        with self._offloader:
            return self._hf_state_dict(StateDictOptions(full_state_dict=True))

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The actor's full state dict on CPU for a rollout worker in another process (split placement):
        complete on rank 0, empty on the other ranks. Collective: every rank must call it."""
        self._require("actor", "export_weights")
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        with self._offloader:
            return self._hf_state_dict(options)

    def receive_weights(self, state: dict[str, torch.Tensor]) -> dict[str, float]:
        """Load a trainer's full state dict into this worker's rollout engine; verify it when
        ``rollout.check_weight_sync``. Returns ``rollout/weight_version`` and the check's metrics.

        A rollout-only worker (split placement) has no trainer model to compare log-probs with, so an
        engine without ``weight_checksum()`` is verified by its weight version only (warned once)."""
        self._require("rollout", "receive_weights")
        self.rollout_engine.wake()
        self.rollout_engine.update_weights(state.items())
        metrics: dict[str, float] = {}
        if self.rollout_config.get("check_weight_sync", True):
            metrics.update(self.check_weight_sync(state))
        metrics["rollout/weight_version"] = float(self.rollout_engine.weight_version)
        return metrics

    def sync_weights(self) -> dict[str, float]:
        """Push the actor's weights into the rollout engine; verify them when ``rollout.check_weight_sync``.

        Returns ``actor/weight_sync_s``, ``rollout/weight_version`` and (when checked) the metrics of
        :meth:`check_weight_sync`.
        """
        self._require("actor", "sync_weights")
        self._require("rollout", "sync_weights")
        start = time.perf_counter()
        metrics = self.receive_weights(self.full_state_dict())
        metrics["actor/weight_sync_s"] = time.perf_counter() - start
        return metrics

    def check_weight_sync(self, state: dict[str, torch.Tensor] | None = None) -> dict[str, float]:
        """Verify that the rollout engine serves the trainer's weights; returns the check's metrics.

        The exact check when the engine supports it, else the probe (each raises :class:`WeightSyncError`):

        - ``rollout/weight_checksum_diff``: the relative difference between the engine's
          ``weight_checksum()`` and :func:`rlcore.rollout.weights.state_checksum` of ``state`` (the
          trainer's full state dict, gathered again when omitted) cast to the engine's dtype, skipping
          the engine's ``uncounted_names``; more than ``1e-6`` fails.
        - ``rollout/weight_sync_logprob_diff`` (engines without a checksum, such as vLLM, whose kernels
          repack the weights): the mean absolute difference between the engine's ``prompt_log_probs()``
          of a fixed probe sequence and the trainer's own (needs the actor on this worker); more than
          ``rollout.weight_sync_logprob_tol`` fails (default: 1e-3 when the engine serves float32, 5e-2
          in lower precision).
        """
        self._require("rollout", "check_weight_sync")
        metrics: dict[str, float] = {}
        if hasattr(self.rollout_engine, "weight_checksum"):
            if state is None:
                state = self.full_state_dict()
            skip = getattr(self.rollout_engine, "uncounted_names", ())
            dtype = self._rollout_dtype
            expected = state_checksum(((name, tensor.to(dtype)) for name, tensor in state.items()), skip=skip)
            actual = float(self.rollout_engine.weight_checksum())
            diff = abs(actual - expected) / max(abs(expected), 1e-12)
            if not diff <= WEIGHT_SYNC_RTOL:
                raise WeightSyncError(
                    f"weight sync failed: the rollout engine does not serve the trainer's weights (checksum "
                    f"{actual!r} vs the trainer's {expected!r}, relative difference {diff:.3g} > {WEIGHT_SYNC_RTOL:g}). "
                    f"Check the {ARR}.rollout.name engine's update_weights(); set {ARR}.rollout.check_weight_sync=false "
                    "only to debug"
                )
            metrics["rollout/weight_checksum_diff"] = diff
        if not metrics and hasattr(self.rollout_engine, "prompt_log_probs") and self.actor_module is not None:
            metrics["rollout/weight_sync_logprob_diff"] = self._check_log_prob_parity()
        elif not metrics and not self._warned_unverified:
            self._warned_unverified = True
            logger.warning(
                "rank %d: the %s rollout engine has no weight_checksum(), and this %r worker has no trainer model "
                "to compare log-probs with: weight syncs are checked by weight version only",
                self.rank, self.rollout_config.get("name"), self.role,
            )
        return metrics

    def _check_log_prob_parity(self) -> float:
        """The mean absolute difference between the engine's and the actor's log-probs of the probe sequence;
        raises :class:`WeightSyncError` above ``rollout.weight_sync_logprob_tol``."""
        # at most 32 tokens, and room in the engine's context (prompt + response length) for one more
        room = int(self.rollout_config.get("prompt_length") or 0) + int(self.rollout_config.get("response_length") or 0)
        ids = self.tokenizer(WEIGHT_SYNC_PROBE_TEXT)["input_ids"][: max(2, min(32, room - 1))]
        tokens = torch.tensor([ids], dtype=torch.long)
        probe = Batch.from_dict(
            {
                "input_ids": tokens,
                "attention_mask": torch.ones_like(tokens),
                "position_ids": torch.arange(len(ids))[None],
                "responses": tokens[:, 1:],
            },
            meta={"temperature": 1.0},
        )
        with self._offloader:
            trainer, _ = self._log_probs(self.actor_module, probe, 1, None, "", with_entropy=False)
        engine = self.rollout_engine.prompt_log_probs(ids).to(torch.float32)
        diff = float((engine - trainer[0].float()).abs().mean())
        tolerance = self.rollout_config.get("weight_sync_logprob_tol")
        if tolerance is None:
            tolerance = 1e-3 if self._rollout_dtype == torch.float32 else 5e-2
        if not diff <= tolerance:
            raise WeightSyncError(
                f"weight sync failed: the rollout engine's log-probs of a probe sequence differ from the trainer's "
                f"by {diff:.3g} on average (> {ARR}.rollout.weight_sync_logprob_tol={tolerance:g}), so it does not "
                f"serve the trainer's weights. Check the {ARR}.rollout.name engine's update_weights(); set "
                f"{ARR}.rollout.check_weight_sync=false only to debug"
            )
        return diff

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path: str | Path) -> None:
        """Write the actor's checkpoint into the directory ``path`` (the controller passes
        ``global_step_N/actor``). Every rank must call this; roles without an actor save nothing.

        What is saved follows ``actor.checkpoint.save_contents``: ``model`` and ``optimizer`` as sharded
        ``torch.distributed.checkpoint`` directories, ``extra`` per rank (LR schedule, RNG states, the
        update shuffle generator and the rollout engine's sampling state), and ``hf_model`` a Hugging Face
        export of the weights in ``path/huggingface`` (``model.safetensors``, loadable with
        ``AutoModelForCausalLM.from_pretrained``). The model config and the tokenizer always go to
        ``path/huggingface``.
        """
        if not self.has_actor:
            return
        self._require("actor", "save_checkpoint")
        directory = Path(path)
        extra: dict[str, Any] = {"lr_scheduler": self.lr_scheduler.state_dict()}
        if self.shuffle_generator is not None:
            extra["shuffle_generator"] = self.shuffle_generator.get_state()
        if self.rollout_engine is not None:
            if hasattr(self.rollout_engine, "state_dict"):
                extra["rollout"] = self.rollout_engine.state_dict()
            elif self.rank == 0:
                logger.warning(
                    "the rollout engine %s has no state_dict(): its sampling state is not checkpointed, so a "
                    "resumed run samples differently from an uninterrupted one", type(self.rollout_engine).__name__,
                )
        contents = self._contents(self.config, f"{ARR}.actor", "save_contents")
        with self._offloader:
            self._save_state(
                directory, model=self.actor_module, optimizer=self.optimizer, extra=extra, contents=contents
            )
            if "hf_model" in contents:
                self._export_hf(directory / "huggingface")
        if self.rank == 0:
            self.actor_module.config.save_pretrained(directory / "huggingface")
            self.tokenizer.save_pretrained(directory / "huggingface")
        self._barrier()

    def _export_hf(self, directory: Path) -> None:
        """Write the actor's weights (with LoRA: merged) as a Hugging Face model directory; gathered on every
        rank, saved by rank 0."""
        state = self._hf_state_dict(StateDictOptions(full_state_dict=True, cpu_offload=True))
        if self.rank == 0:
            module = self.actor_module
            model = module.get_base_model() if hasattr(module, "get_base_model") else module
            model.save_pretrained(directory, state_dict=state)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote into ``path`` (per ``actor.checkpoint.load_contents``),
        push the weights to the rollout engine and restore the engine's sampling state."""
        if not self.has_actor:
            return
        self._require("actor", "load_checkpoint")
        with self._offloader:
            extra = self._load_state(
                Path(path),
                model=self.actor_module,
                optimizer=self.optimizer,
                contents=self._contents(self.config, f"{ARR}.actor", "load_contents"),
                key=f"{ARR}.actor.checkpoint.load_contents",
            )
        if extra is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
            if self.shuffle_generator is not None and "shuffle_generator" in extra:
                self.shuffle_generator.set_state(extra["shuffle_generator"])
        if self.has_rollout:
            self.sync_weights()
            if extra is not None and "rollout" in extra and hasattr(self.rollout_engine, "load_state_dict"):
                self.rollout_engine.load_state_dict(extra["rollout"])

