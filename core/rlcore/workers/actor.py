"""The actor/rollout/reference worker: one rank of the policy side of a run, on any training backend.

It hosts the rollout engine, runs the PPO update through the backend's :class:`TrainingEngine`, checks
every weight sync and writes the actor's checkpoints. Roles (``ROLE_PARTS``): ``actor_rollout_ref`` (the
hybrid default), ``actor_rollout``, ``actor``, ``actor_ref`` (split placement), ``rollout`` and ``ref``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar, cast

import torch

from rlcore.algos.functional import agg_loss
from rlcore.algos.losses import build_actor_loss, loss_terms
from rlcore.api.batch import Batch
from rlcore.api.groups import ActorRole
from rlcore.api.rollout import (
    RolloutEngine,
    SupportsClose,
    SupportsPartialRollout,
    SupportsSamplingState,
    SupportsSharedWeights,
    SupportsWeightChecksum,
)
from rlcore.api.training import (
    GATHER_IDS,
    GATHERED_LOG_PROBS,
    ROUTED_EXPERTS,
    ModelOutput,
    SupportsLiveWeights,
    SupportsWeightStream,
    TrainingEngine,
)
from rlcore.api.transport import BucketChecksumError, SparseDelta, TransportReport, WeightBucket, WeightTransport
from rlcore.config.batch_sizes import (
    LOG_PROB_BUDGET,
    UpdateBatchSizes,
    data_parallel_size,
    inference_micro_batch_size,
    ppo_batch_sizes,
    token_budget,
)
from rlcore.config.plugin_sections import plugin_section
from rlcore.config.router_replay import ROUTING_REPLAY_KEY, replay_mode
from rlcore.config.sections.actor import ActorConfig
from rlcore.dtypes import parse_dtype
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins
from rlcore.registry import UnknownComponentError
from rlcore.rollout.buckets import RunningChecksum, distinct_weights, weight_buckets
from rlcore.rollout.transport import EngineReceiver, engine_takes_partial, resolve_bucket
from rlcore.rollout.weights import state_checksum
from rlcore.workers.base import WorkerBase, cpu_batch
from rlcore.workers.micro_batches import plan_micro_batches
from rlcore.workers.ppo_loop import UpdateSettings, ppo_update

ARR = "actor_rollout_ref"
ACTOR = f"{ARR}.actor"
#: role (:data:`rlcore.api.groups.ActorRole`) -> (has actor, has rollout engine, has reference model)
ROLE_PARTS: dict[ActorRole, tuple[bool, bool, bool]] = {
    "actor_rollout_ref": (True, True, True),
    "actor_rollout": (True, True, False),
    "actor": (True, False, False),
    "actor_ref": (True, False, True),
    "rollout": (False, True, False),
    "ref": (False, False, True),
}
logger = logging.getLogger(__name__)
_Part = TypeVar("_Part")

#: largest relative difference between the trainer's and the rollout engine's weight checksums
WEIGHT_SYNC_RTOL = 1e-6
#: the probe sequence whose log-probs the trainer and the rollout engine compare after every weight sync
WEIGHT_SYNC_PROBE_TEXT = "Weight sync probe: 12 + 30 = 42, and the quick brown fox jumps over the lazy dog."


class WeightSyncError(RLCoreError):
    """The rollout engine does not serve the weights the trainer just pushed."""


class ActorRolloutRefWorker(WorkerBase):
    """The policy worker: a trainable actor engine, a frozen reference engine and a rollout engine, by role.

    Methods that need a part the role lacks raise :class:`RLCoreError`.
    """

    ROLES = tuple(ROLE_PARTS)
    MODEL_SECTIONS = (f"{ARR}.model",)

    def configure(self) -> None:
        """Validate the config for this role: model path, batch sizes and token budgets."""
        policy = self.sections.actor_rollout_ref
        if not policy.model.path:
            raise RLCoreError(f"{ARR}.model.path is not set: give a Hugging Face model directory or hub name")
        self.has_actor, self.has_rollout, self.has_ref = ROLE_PARTS[
            cast(ActorRole, self.role)
        ]  # WorkerBase checked ROLES
        self.model_config, self.actor_config, self.rollout_config = policy.model, policy.actor, policy.rollout
        dp_size = data_parallel_size(self.config, ACTOR, self.world_size)
        self.update_budget = token_budget(policy.actor, "use_dynamic_bsz", "ppo_max_token_len_per_gpu")
        self.log_prob_budget = token_budget(policy.rollout, *LOG_PROB_BUDGET)
        self.ref_budget = token_budget(policy.ref, *LOG_PROB_BUDGET)
        self.update_sizes: UpdateBatchSizes | None = None
        if self.has_actor:
            self.update_sizes = ppo_batch_sizes(policy.actor, policy.rollout.n, dp_size)
            self._check_engine_config("actor", ACTOR, f"{ARR}.model")
        if self.has_ref:
            self._check_engine_config("ref", f"{ARR}.ref", f"{ARR}.model")
        #: the most bytes of gathered weights a sync holds at once (None: the whole state dict);
        #: ``layered_summon`` without a bucket size: one tensor per bucket
        self.bucket_bytes = policy.rollout.sync_bucket_bytes
        self._export: Iterator[list[tuple[str, torch.Tensor]]] | None = None
        self._export_scope = ExitStack()
        self._incoming: dict[str, torch.Tensor] = {}
        #: split placement, an incremental transport: the full weights this rollout worker last loaded
        self._received: dict[str, torch.Tensor] | None = None
        self.transport_config = policy.rollout.checkpoint_engine
        self.transport: WeightTransport | None = None
        #: colocated: the rollout engine's receive side, kept from sync to sync (built with the transport)
        self.receiver: EngineReceiver | None = None
        self.log_prob_micro_batch_size = inference_micro_batch_size(policy.rollout, dp_size)
        self.ref_micro_batch_size = inference_micro_batch_size(policy.ref, dp_size)
        self.tokenizer: Any = None
        self.actor: TrainingEngine | None = None
        self.ref: TrainingEngine | None = None
        self.rollout_engine: RolloutEngine | None = None
        self._warned_unverified = False
        self.loss_fn: Any = None
        self.shuffle_generator: torch.Generator | None = None
        self.replay_mode = replay_mode(self.config, ACTOR)

    # ------------------------------------------------------------------ set-up
    def init_model(self) -> None:
        """Load the tokenizer and, by role, the actor engine (+ loss and shuffling generator), the reference
        engine and the rollout engine (synced with the actor's weights right away)."""
        self.tokenizer = self._load_tokenizer()
        if self.has_actor:
            self.actor = self._create_engine("actor", ACTOR, f"{ARR}.model")
            self.loss_fn = build_actor_loss(
                plugin_section(self.config, ActorConfig, load_plugins()),
                loss_terms(self.config),
                rollout_correction=self.sections.algorithm.rollout_correction,
            )
            if self.actor_config.shuffle:
                self.shuffle_generator = torch.Generator().manual_seed(int(self.actor_config.data_loader_seed))
        if self.has_ref:
            self.ref = self._create_engine("ref", f"{ARR}.ref", f"{ARR}.model", share_with=self.actor)
        if self.has_rollout:
            self._init_rollout()
            if self.has_actor:
                self.sync_weights()

    def _load_tokenizer(self) -> Any:
        """The tokenizer of ``model.tokenizer_path`` (else ``model.path``), with ``custom_chat_template``."""
        from transformers import AutoTokenizer

        model_config = self.model_config
        path = model_config.tokenizer_path or model_config.path
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=bool(model_config.trust_remote_code))
        except (OSError, ValueError) as exc:
            key = "tokenizer_path" if model_config.tokenizer_path else "path"
            raise RLCoreError(f"{ARR}.model.{key}={path!r} has no loadable tokenizer: {exc}") from exc
        if model_config.custom_chat_template:
            tokenizer.chat_template = model_config.custom_chat_template
        return tokenizer

    def rollout_dtype(self) -> torch.dtype:
        """What the rollout engine serves: ``rollout.dtype`` on CUDA, else the dtype the trainer on this
        rank computes in (the actor's, or the reference's: the same model; float32 on a rollout-only
        rank). A weight transport compares and sends the weights in it."""
        if self.device.type == "cuda":
            return parse_dtype(self.rollout_config.dtype, f"{ARR}.rollout.dtype")
        trainer = self.actor or self.ref
        return trainer.compute_dtype if trainer is not None else torch.float32

    def _init_rollout(self) -> None:
        """Construct the rollout engine named by ``rollout.name`` from the model path."""
        from rlcore.plugins import get_component

        name = self.rollout_config.name
        try:
            engine_cls = get_component("rollout_engine", name)
        except UnknownComponentError as exc:
            raise UnknownComponentError(f"{ARR}.rollout.name: {exc}") from exc
        model_path = self.model_config.path
        assert model_path is not None, "configure() refuses a missing actor_rollout_ref.model.path"
        dtype = self.rollout_dtype()
        self.rollout_engine = engine_cls(
            model_path,
            self.tokenizer,
            engine_cls.config_class.from_tree(self.config),  # the typed section, the engine plugin's keys included
            device=self.device,
            dtype=dtype,
        )
        backend = self.transport_config.backend
        try:
            self.transport = get_component("weight_transport", backend)(self.transport_config)
        except UnknownComponentError as exc:
            raise UnknownComponentError(f"{ARR}.rollout.checkpoint_engine.backend: {exc}") from exc
        self.receiver = EngineReceiver(self.rollout_engine, dtype, keep=self.transport.incremental)

    def _require(self, part: str, method: str, built: _Part | None) -> _Part:
        """``built`` (the actor, ref or rollout engine); raises when ``method`` needs a part this role lacks
        or that ``init_model`` has not built yet."""
        present = {"actor": self.has_actor, "rollout": self.has_rollout, "ref": self.has_ref}[part]
        if not present:
            raise RLCoreError(f"{method}() needs the {part}, but this worker's role is {self.role!r}")
        if built is None:
            raise RLCoreError(f"{method}() called before init_model()")
        return built

    def _actor_engine(self, method: str) -> TrainingEngine:
        """The actor engine, for ``method``."""
        return self._require("actor", method, self.actor)

    def _rollout(self, method: str) -> RolloutEngine:
        """The rollout engine, for ``method``."""
        return self._require("rollout", method, self.rollout_engine)

    def _temperature(self, batch: Batch) -> float:
        """The sampling temperature of ``batch`` (``meta["temperature"]``, else ``rollout.temperature``)."""
        temperature = float(batch.meta.get("temperature", self.rollout_config.temperature))
        if temperature <= 0:
            raise RLCoreError(
                f"log-probs need a positive sampling temperature ({ARR}.rollout.temperature), got {temperature}"
            )
        return temperature

    def _forward(
        self,
        engine: TrainingEngine,
        batch: Batch,
        micro_size: int | None,
        budget: int | None,
        budget_key: str,
        names: tuple[str, ...],
    ) -> dict[str, torch.Tensor]:
        """The :class:`ModelOutput` fields ``names`` (``log_probs`` first, then ``entropy`` and/or
        ``sum_pi_squared``) of the whole batch without gradients, in micro-batches of ``micro_size`` rows or,
        with a token ``budget`` (config key ``budget_key``), of balanced token counts (the actor's with
        ``use_prefix_grouper``: whole groups of a prompt); the results come back on the CPU in the batch's row
        order. The batch's ``gather_ids`` are left out: only the update reads the log-probs at them."""
        temperature = self._temperature(batch)
        data = cpu_batch(batch)
        if GATHER_IDS in data:
            data = data.select([key for key in data.keys() if key != GATHER_IDS])
        plan = plan_micro_batches(
            data,
            size=micro_size,
            budget=budget,
            budget_key=budget_key,
            device=engine.device,
            grouped=engine is self.actor and bool(self.actor_config.use_prefix_grouper),
        )
        with engine.resident():
            if "sum_pi_squared" in names:  # never passed otherwise: not every backend takes it (see forward)
                outputs = engine.forward(
                    plan.parts, temperature=temperature, with_entropy="entropy" in names, with_sum_pi_squared=True
                )
            else:
                outputs = engine.forward(plan.parts, temperature=temperature, with_entropy="entropy" in names)
        return {name: plan.restore([out.require(name) for out in outputs]).cpu() for name in names}

    def _log_probs(
        self,
        engine: TrainingEngine,
        batch: Batch,
        micro_size: int | None,
        budget: int | None,
        budget_key: str,
        *,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of the whole batch, as :meth:`_forward` computes them."""
        names = ("log_probs", "entropy") if with_entropy else ("log_probs",)
        out = self._forward(engine, batch, micro_size, budget, budget_key, names)
        return out["log_probs"], out.get("entropy")

    def device_peak(self) -> dict[str, Any]:
        """This rank's device peak in the dtype the actor (else the reference) computes in, as
        :meth:`rlcore.tracking.device_peak.DevicePeak.as_dict` gives it: the denominator of ``perf/mfu/*``."""
        from rlcore.tracking.device_peak import device_peak

        engine = self.actor or self.ref
        dtype = engine.compute_dtype if engine is not None else torch.float32
        return device_peak(self.device, dtype).as_dict()

    # ---------------------------------------------------------------- methods
    def _check_rollout_routing(self, batch: Batch, method: str) -> None:
        """With ``router_replay.mode=R3`` the batch must carry the rollout's ``routed_experts``."""
        if self.replay_mode == "R3" and ROUTED_EXPERTS not in batch:
            raise RLCoreError(
                f"{method}(): {ACTOR}.router_replay.mode=R3 replays the rollout's routing, but the batch has no "
                f"{ROUTED_EXPERTS}: the {self.rollout_config.name!r} rollout engine did not record them ({ROUTING_REPLAY_KEY})"
            )

    def compute_log_prob(self, batch: Batch) -> Batch:
        """``old_log_probs`` and ``entropys`` ``[B, R]`` of the batch's responses under the current actor,
        in micro-batches of ``rollout.log_prob_micro_batch_size_per_gpu`` (or, with
        ``rollout.log_prob_use_dynamic_bsz``, of at most ``rollout.log_prob_max_token_len_per_gpu`` tokens);
        with ``actor.calculate_sum_pi_squared`` also ``sum_pi_squared`` ``[B, R]`` (Σπ² of each next-token
        distribution, for the optimal token baseline).

        Mixture-of-experts routing (``actor.router_replay.mode``): with R2 the pass records each token's
        experts and returns them as ``routed_experts`` ``[B, P + R, L, k]`` for the update to replay; with R3 it
        replays the rollout's ``routed_experts``, which the batch must carry."""
        self._check_rollout_routing(batch, "compute_log_prob")
        with_sum_pi_squared = bool(self.actor_config.calculate_sum_pi_squared)
        names = ("log_probs", "entropy", "sum_pi_squared") if with_sum_pi_squared else ("log_probs", "entropy")
        out = self._forward(
            self._actor_engine("compute_log_prob"),
            batch,
            self.log_prob_micro_batch_size,
            self.log_prob_budget,
            f"{ARR}.rollout.log_prob_max_token_len_per_gpu",
            (*names, "routed_experts") if self.replay_mode == "R2" else names,
        )
        result = {"old_log_probs": out["log_probs"], "entropys": out["entropy"]}
        if with_sum_pi_squared:
            result["sum_pi_squared"] = out["sum_pi_squared"]
        if self.replay_mode == "R2":
            result[ROUTED_EXPERTS] = out["routed_experts"]
        return Batch.from_dict(result)

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """``ref_log_prob`` ``[B, R]`` under the frozen reference policy, in micro-batches of
        ``ref.log_prob_micro_batch_size_per_gpu`` (or of at most ``ref.log_prob_max_token_len_per_gpu``
        tokens with ``ref.log_prob_use_dynamic_bsz``)."""
        log_probs, _ = self._log_probs(
            self._require("ref", "compute_ref_log_prob", self.ref),
            batch,
            self.ref_micro_batch_size,
            self.ref_budget,
            f"{ARR}.ref.log_prob_max_token_len_per_gpu",
            with_entropy=False,
        )
        return Batch.from_dict({"ref_log_prob": log_probs})

    def update_actor(self, batch: Batch) -> Batch:
        """One PPO update on this rank's responses; returns an empty Batch with ``meta["metrics"]``.

        Mini-batches hold ``ppo_mini_batch_size × rollout.n / data-parallel size`` responses, micro-batches
        ``ppo_micro_batch_size_per_gpu`` (or at most ``ppo_max_token_len_per_gpu`` tokens with
        ``use_dynamic_bsz``); ``ppo_epochs`` passes, optionally shuffled. Losses are normalised over the
        global mini-batch (:func:`rlcore.workers.ppo_loop.ppo_update`). The LR scheduler steps once per
        call and ``actor/lr`` is the rate this update used. Metrics are python floats averaged over
        micro-batches (``actor/grad_norm`` over the optimizer steps taken).

        With ``meta["on_policy"]`` (one on-policy optimizer step, decided by the controller) no
        ``compute_log_prob`` pass ran: the old log-probs are this forward's own, detached (ratio 1), and
        ``actor/entropy`` is measured here.

        A mixture-of-experts actor with ``router_replay.mode`` R2 or R3 routes each token to the batch's
        ``routed_experts`` (recorded by ``compute_log_prob`` or by the rollout); with R2 and the on-policy
        shortcut there is nothing recorded, and the update's own routing is the old policy's.
        """
        actor = self._actor_engine("update_actor")
        self._check_rollout_routing(batch, "update_actor")
        with_entropy = float(self.actor_config.entropy_coeff) != 0.0
        on_policy = bool(batch.meta.get("on_policy", False))
        agg_mode = self.actor_config.loss_agg_mode

        def objective(micro: Batch, output: ModelOutput) -> tuple[torch.Tensor, dict[str, float]]:
            """The actor loss of one micro-batch and its metrics (the forward's log-probs at the batch's
            ``gather_ids``, when it has them, reach the loss terms as ``micro["gathered_log_probs"]``)."""
            log_prob = output.require("log_probs")
            if GATHER_IDS in micro:
                micro[GATHERED_LOG_PROBS] = output.require("gathered_log_probs")
            if not on_policy:
                return self.loss_fn(log_prob, output.entropy, micro)
            entropy = output.require("entropy")
            micro["old_log_probs"] = log_prob.detach()
            loss, metrics = self.loss_fn(log_prob, entropy if with_entropy else None, micro)
            entropy_metric = agg_loss(entropy.detach(), micro["response_mask"], agg_mode).item()
            return loss, {**metrics, "actor/entropy": entropy_metric}

        settings = UpdateSettings(
            sizes=self._require("actor", "update_actor", self.update_sizes),
            epochs=int(self.actor_config.ppo_epochs),
            grad_clip=self.actor_config.grad_clip,
            loss_agg_mode=agg_mode,
            prefix="actor",
            budget=self.update_budget,
            budget_key=f"{ACTOR}.ppo_max_token_len_per_gpu",
            temperature=self._temperature(batch),
            with_entropy=with_entropy or on_policy,
            grouped=bool(self.actor_config.use_prefix_grouper),
        )
        with actor.resident():
            metrics = ppo_update(actor, cpu_batch(batch), objective, settings, self.shuffle_generator)
        metrics["actor/lr"] = actor.lr_scheduler_step()
        return Batch.from_dict({}, meta={"metrics": metrics})

    def shutdown(self) -> None:
        """Stop the rollout engine's own processes (:class:`~rlcore.api.rollout.SupportsClose`), then the
        engines and the process group."""
        if isinstance(self.rollout_engine, SupportsClose):
            self.rollout_engine.close()
            self.rollout_engine = None
        super().shutdown()

    def generate_sequences(self, batch: Batch) -> Batch:
        """Sample responses with the rollout engine (``meta["validate"]`` selects the validation sampling).

        The engine is woken first and, with ``rollout.free_cache_engine``, put to sleep afterwards so that
        training gets its memory back (engines skip both where there is nothing to free, e.g. on CPU)."""
        engine = self._rollout("generate_sequences")
        engine.wake()
        out = engine.generate(batch, validate=bool(batch.meta.get("validate", False)))
        if self.rollout_config.free_cache_engine:
            engine.sleep()
        return out

    def generate_partial(self, batch: Batch) -> Batch:
        """Partial rollout: at most ``batch.meta["max_new_tokens"]`` more tokens for every unfinished row with
        the weights the engine serves now (:class:`~rlcore.api.rollout.SupportsPartialRollout`; ``batch``:
        fresh prompts or the previous call's output). Woken and put to sleep as :meth:`generate_sequences`.

        Raises :class:`RLCoreError` naming the engine when it lacks the ability, and naming
        ``meta["max_new_tokens"]`` when it is missing or not a positive integer.
        """
        engine = self._rollout("generate_partial")
        if not isinstance(engine, SupportsPartialRollout):
            raise RLCoreError(
                f"{ARR}.rollout.name={self.rollout_config.name}: the rollout engine {type(engine).__name__} has no "
                "partial rollout (rlcore.api.SupportsPartialRollout: generate_partial); use rollout.name=hf or vllm"
            )
        budget = batch.meta.get("max_new_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
            raise RLCoreError(
                f'generate_partial: batch.meta["max_new_tokens"] must be a positive integer (the token budget of '
                f"the call), got {budget!r}"
            )
        engine.wake()
        out = engine.generate_partial(batch, budget, validate=bool(batch.meta.get("validate", False)))
        if self.rollout_config.free_cache_engine:
            engine.sleep()
        return out

    # ------------------------------------------------------------ weight sync
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The actor's full (unsharded) weights with Hugging Face names on every rank (with LoRA: merged)."""
        actor = self._actor_engine("full_state_dict")
        with actor.resident():
            return actor.full_weights()

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The actor's full weights on CPU for a rollout worker in another process (split placement):
        complete on rank 0, empty on the other ranks. Collective: every rank must call it."""
        actor = self._actor_engine("export_weights")
        with actor.resident():
            return actor.full_weights(only_rank0=True)

    def _weight_stream(self, actor: TrainingEngine, *, only_rank0: bool) -> Iterator[tuple[str, torch.Tensor]]:
        """The actor's full weights as ``(name, tensor)`` pairs without tied aliases: gathered one tensor at a
        time by an engine that can (:class:`~rlcore.api.training.SupportsWeightStream`), else from its
        :meth:`TrainingEngine.full_weights`. Collective: every rank must consume it whole."""
        if isinstance(actor, SupportsWeightStream):
            return actor.iter_full_weights(only_rank0=only_rank0)
        return distinct_weights(actor.full_weights(only_rank0=only_rank0))

    def begin_weight_export(self) -> None:
        """Start a bucketed export of the actor's weights (split placement): :meth:`next_weight_bucket` then
        gathers them bucket by bucket (``rollout.checkpoint_engine.update_weights_bucket_megabytes``).
        Collective: every rank must call it and then :meth:`next_weight_bucket` until it returns None."""
        actor = self._actor_engine("begin_weight_export")
        self._export_scope.close()
        self._export_scope.enter_context(actor.resident())
        self._export = weight_buckets(self._weight_stream(actor, only_rank0=True), self.bucket_bytes)

    def next_weight_bucket(self) -> dict[str, torch.Tensor] | None:
        """The next bucket of the export :meth:`begin_weight_export` started: CPU tensors by Hugging Face
        name, complete on rank 0 (empty on the other ranks); None once every weight was sent."""
        if self._export is None:
            raise RLCoreError("next_weight_bucket() before begin_weight_export(): start the export first")
        bucket = next(self._export, None)
        if bucket is None:
            self._export = None
            self._export_scope.close()
            return None
        return dict(bucket) if self.rank == 0 else {}

    def receive_weight_bucket(
        self,
        bucket: dict[str, torch.Tensor],
        digest: str | None = None,
        deltas: dict[str, SparseDelta] | None = None,
    ) -> None:
        """Keep one bucket of a trainer's weights (split placement) until :meth:`receive_weights` loads them;
        ``deltas``: changed elements of tensors, applied to the weights the last ``keep`` load held; ``digest``:
        the sender's checksum of the resulting tensors, checked here (:class:`BucketChecksumError`)."""
        received = WeightBucket(list(bucket.items()), digest, list((deltas or {}).items()))
        self._incoming.update(resolve_bucket(received, self._received or {}))

    def receive_weights(
        self,
        state: dict[str, torch.Tensor] | None = None,
        *,
        shared: bool = False,
        partial: bool = False,
        keep: bool = False,
    ) -> dict[str, float]:
        """Load a trainer's full weights into this worker's rollout engine; verify them when
        ``rollout.check_weight_sync``. Returns ``rollout/weight_version`` and the check's metrics.
        ``state`` None: the buckets :meth:`receive_weight_bucket` kept. ``shared``: the engine already serves
        ``state``'s own tensors (``share_weights``), nothing is copied. ``partial``: the buckets hold only the
        tensors that changed since the last ``keep`` load (an incremental transport); ``keep``: hold the
        loaded weights on CPU as the base of the next partial load.

        A rollout-only worker (split placement) has no trainer model to compare log-probs with, so an
        engine without ``weight_checksum()`` is verified by its weight version only (warned once)."""
        engine = self._rollout("receive_weights")
        if state is None:
            state, self._incoming = self._incoming, {}
        changed = state
        if partial:
            if self._received is None:
                raise WeightSyncError("a partial weight update arrived before a full one: resend in full")
            state = {**self._received, **changed}
        self._received = state if keep else None
        engine.wake()
        if partial and engine_takes_partial(engine):
            engine.update_weights(changed.items(), strict=False)  # type: ignore[call-arg]  # checked it takes strict
        elif not shared:
            engine.update_weights(state.items())
        metrics: dict[str, float] = {}
        if self.rollout_config.check_weight_sync:
            metrics.update(self.check_weight_sync(state))
        metrics["rollout/weight_version"] = float(engine.weight_version)
        return metrics

    def sync_weights(self) -> dict[str, float]:
        """Push the actor's weights into the rollout engine through the run's weight transport
        (``rollout.checkpoint_engine.backend``); verify them when ``rollout.check_weight_sync``.

        Returns ``actor/weight_sync_s``, ``rollout/weight_version``, the transport's metrics and (when checked)
        the metrics of :meth:`check_weight_sync`. A partial send whose bucket checksum or check fails is sent
        again in full (the transport reset).
        """
        actor = self._actor_engine("sync_weights")
        engine = self._rollout("sync_weights")
        start = time.perf_counter()
        live = self._shared_weights(actor, engine)
        if live is not None:
            metrics = self.receive_weights(live, shared=True)
        else:
            try:
                metrics = self._send_weights(actor, engine)
            except (BucketChecksumError, WeightSyncError) as exc:
                transport = self._transport()
                if not transport.incremental:
                    raise
                logger.warning("rank %d: %s; resending every weight", self.rank, exc)
                transport.reset()
                metrics = self._send_weights(actor, engine)
        metrics["actor/weight_sync_s"] = time.perf_counter() - start
        return metrics

    def _transport(self) -> WeightTransport:
        """The run's weight transport (built with the rollout engine)."""
        if self.transport is None:
            raise RLCoreError("sync_weights() before init_model(): the weight transport is built with the rollout")
        return self.transport

    @staticmethod
    def _shared_weights(actor: TrainingEngine, engine: RolloutEngine) -> dict[str, torch.Tensor] | None:
        """On one CPU rank, the actor's own parameter tensors once the engine serves them itself (no copy, no
        second model: :class:`~rlcore.api.training.SupportsLiveWeights` and
        :class:`~rlcore.api.rollout.SupportsSharedWeights`); None where either engine cannot."""
        if not (isinstance(actor, SupportsLiveWeights) and isinstance(engine, SupportsSharedWeights)):
            return None
        live = actor.live_weights()
        return live if live is not None and engine.share_weights(live.items()) else None

    def _send_weights(self, actor: TrainingEngine, engine: RolloutEngine) -> dict[str, float]:
        """One colocated send through the transport, then the check. Without a bucket size the whole state
        dict is gathered first and checked as such; with one, the engine's ``update_weights`` reads a stream
        that gathers the next bucket only once the previous one was handed on (an engine that copies tensors
        as they arrive, such as ``hf``, then holds one bucket of gathered weights at a time), and the trainer's
        checksum is summed tensor by tensor as they pass. A check that fails after a partial send resets the
        transport (the engine's weights are no longer known) and raises."""
        transport = self._transport()
        receiver = self.receiver
        assert receiver is not None, "_init_rollout builds the receiver with the transport"
        checked = bool(self.rollout_config.check_weight_sync) and isinstance(engine, SupportsWeightChecksum)
        state: dict[str, torch.Tensor] | None = None
        checksum: RunningChecksum | None = None
        report: TransportReport
        if self.bucket_bytes is None:
            state = self.full_state_dict()
            engine.wake()
            report = transport.send(iter(state.items()), receiver, None)
        else:
            engine.wake()
            skip = engine.uncounted_names if isinstance(engine, SupportsWeightChecksum) else frozenset[str]()
            checksum = RunningChecksum(self.rollout_dtype(), skip)
            with actor.resident():
                report = transport.send(self._tapped(actor, checksum if checked else None), receiver, self.bucket_bytes)
        metrics: dict[str, float] = {}
        if self.rollout_config.check_weight_sync:
            trainer_checksum = checksum.value if checked and checksum is not None else None
            try:
                metrics.update(self.check_weight_sync(state, trainer_checksum=trainer_checksum))
            except WeightSyncError:
                if not report.full:
                    transport.reset()
                raise
        metrics["rollout/weight_version"] = float(engine.weight_version)
        metrics.update(report.metrics)
        return metrics

    def _tapped(self, actor: TrainingEngine, checksum: RunningChecksum | None) -> Iterator[tuple[str, torch.Tensor]]:
        """The colocated weight stream, each tensor added to ``checksum`` (when given) as it passes."""
        for pair in self._weight_stream(actor, only_rank0=False):
            if checksum is not None:
                checksum.add((pair,))
            yield pair

    def check_weight_sync(
        self, state: dict[str, torch.Tensor] | None = None, *, trainer_checksum: float | None = None
    ) -> dict[str, float]:
        """Verify that the rollout engine serves the trainer's weights; returns the check's metrics.
        ``trainer_checksum``: the trainer's side of the checksum, already summed (a bucketed sync), instead
        of the checksum of ``state``.

        The exact check when the engine supports it, else the probe (each raises :class:`WeightSyncError`):

        - ``rollout/weight_checksum_diff``: the relative difference between the engine's
          ``weight_checksum()`` and :func:`rlcore.rollout.weights.state_checksum` of ``state`` (the
          trainer's full weights, gathered again when omitted) cast to the engine's dtype, skipping the
          engine's ``uncounted_names``; more than ``1e-6`` fails.
        - ``rollout/weight_sync_logprob_diff`` (engines without a checksum, such as vLLM, whose kernels
          repack the weights): the mean absolute difference between the engine's ``prompt_log_probs()``
          of a fixed probe sequence and the trainer's own (needs the actor on this worker); more than
          ``rollout.weight_sync_logprob_tol`` fails (default: 1e-3 when the engine serves float32, 5e-2
          in lower precision).
        """
        engine = self._rollout("check_weight_sync")
        metrics: dict[str, float] = {}
        if isinstance(engine, SupportsWeightChecksum):
            expected = trainer_checksum
            if expected is None:
                if state is None:
                    state = self.full_state_dict()
                skip = engine.uncounted_names
                dtype = self.rollout_dtype()
                expected = state_checksum(((name, tensor.to(dtype)) for name, tensor in state.items()), skip=skip)
            actual = float(engine.weight_checksum())
            diff = abs(actual - expected) / max(abs(expected), 1e-12)
            if not diff <= WEIGHT_SYNC_RTOL:
                raise WeightSyncError(
                    f"weight sync failed: the rollout engine does not serve the trainer's weights (checksum "
                    f"{actual!r} vs the trainer's {expected!r}, relative difference {diff:.3g} > {WEIGHT_SYNC_RTOL:g}). "
                    f"Check the {ARR}.rollout.name engine's update_weights(); set {ARR}.rollout.check_weight_sync=false "
                    "only to debug"
                )
            metrics["rollout/weight_checksum_diff"] = diff
        if not metrics and self.actor is not None:
            metrics["rollout/weight_sync_logprob_diff"] = self._check_log_prob_parity(self.actor, engine)
        elif not metrics and not self._warned_unverified:
            self._warned_unverified = True
            logger.warning(
                "rank %d: the %s rollout engine has no weight_checksum(), and this %r worker has no trainer model "
                "to compare log-probs with: weight syncs are checked by weight version only",
                self.rank,
                self.rollout_config.name,
                self.role,
            )
        return metrics

    def _check_log_prob_parity(self, actor: TrainingEngine, engine: RolloutEngine) -> float:
        """The mean absolute difference between the engine's and the actor's log-probs of the probe sequence;
        raises :class:`WeightSyncError` above ``rollout.weight_sync_logprob_tol``."""
        # at most 32 tokens, and room in the engine's context (prompt + response length) for one more
        room = int(self.rollout_config.prompt_length) + int(self.rollout_config.response_length)
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
        trainer, _ = self._log_probs(actor, probe, 1, None, "", with_entropy=False)
        served = engine.prompt_log_probs(ids).to(torch.float32)
        diff = float((served - trainer[0].float()).abs().mean())
        tolerance = self.rollout_config.weight_sync_logprob_tol
        if tolerance is None:
            tolerance = 1e-3 if self.rollout_dtype() == torch.float32 else 5e-2
        if not diff <= tolerance:
            raise WeightSyncError(
                f"weight sync failed: the rollout engine's log-probs of a probe sequence differ from the trainer's "
                f"by {diff:.3g} on average (> {ARR}.rollout.weight_sync_logprob_tol={tolerance:g}), so it does not "
                f"serve the trainer's weights. Check the {ARR}.rollout.name engine's update_weights(); set "
                f"{ARR}.rollout.check_weight_sync=false only to debug"
            )
        return diff

    # ------------------------------------------------------------ checkpoints
    def rollout_state(self) -> dict[str, Any] | None:
        """This rank's rollout engine's resumable state (its ``state_dict()``: the generate calls that drew
        seeds and the weight version), or None for an engine without one. A rollout-only worker (split placement)
        has no checkpoint of its own: the controller saves these states (one-step-off-policy training)."""
        engine = self._rollout("rollout_state")
        return engine.state_dict() if isinstance(engine, SupportsSamplingState) else None

    def load_rollout_state(self, states: list[dict[str, Any] | None]) -> None:
        """Restore this rank's entry of ``states`` (every rank's :meth:`rollout_state`, in rank order) into
        the rollout engine; call it after the weights are synced."""
        engine = self._rollout("load_rollout_state")
        if len(states) != self.world_size:
            raise RLCoreError(
                f"the saved rollout states are for {len(states)} rollout rank(s), this run has {self.world_size}: "
                "resume with the same trainer.rollout_n_gpus_per_node x trainer.nnodes"
            )
        state = states[self.rank]
        if state is not None and isinstance(engine, SupportsSamplingState):
            engine.load_state_dict(state)

    def save_checkpoint(self, path: str | Path) -> None:
        """Write the actor's checkpoint into the directory ``path`` (the controller passes
        ``global_step_N/actor``). Every rank must call this; roles without an actor save nothing.

        What is saved follows ``actor.checkpoint.save_contents``: ``model`` and ``optimizer`` as the
        engine's sharded state, ``extra`` per rank (the engine's LR schedule, RNG states, the update
        shuffle generator and the rollout engine's sampling state), and ``hf_model`` a Hugging Face export
        of the weights in ``path/huggingface`` (loadable with ``AutoModelForCausalLM.from_pretrained``).
        The model config and the tokenizer always go to ``path/huggingface``.
        """
        if not self.has_actor:
            return
        actor = self._actor_engine("save_checkpoint")
        directory = Path(path)
        extra: dict[str, Any] = {}
        if self.shuffle_generator is not None:
            extra["shuffle_generator"] = self.shuffle_generator.get_state()
        rollout = self.rollout_engine
        if rollout is not None:
            if isinstance(rollout, SupportsSamplingState):
                extra["rollout"] = rollout.state_dict()
            elif self.rank == 0:
                logger.warning(
                    "the rollout engine %s has no state_dict(): its sampling state is not checkpointed, so a "
                    "resumed run samples differently from an uninterrupted one",
                    type(rollout).__name__,
                )
        contents = set(self.actor_config.checkpoint.save_contents)
        with actor.resident():
            self._save_state(directory, actor, extra, contents)
            self._save_hf(actor, directory / "huggingface", with_weights="hf_model" in contents)
        self._barrier()

    def save_model(self, path: str | Path) -> None:
        """Write the actor's current weights as a Hugging Face model into the directory ``path`` (config,
        safetensors weights and tokenizer: ``AutoModelForCausalLM.from_pretrained(path)`` loads it, and so does
        ``rlcore run actor_rollout_ref.model.path=path``); the end of a run with ``trainer.save_final_model``.
        Every rank must call this; roles without an actor save nothing."""
        if not self.has_actor:
            return
        actor = self._actor_engine("save_model")
        with actor.resident():
            self._save_hf(actor, Path(path), with_weights=True)
        self._barrier()

    def _save_hf(self, actor: TrainingEngine, directory: Path, *, with_weights: bool) -> None:
        """The engine's Hugging Face export (the model config, and the weights ``with_weights``) and, from rank
        0, the tokenizer, into ``directory``."""
        actor.save_hf(directory, with_weights=with_weights)
        if self.rank == 0:
            self.tokenizer.save_pretrained(directory)

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore what :meth:`save_checkpoint` wrote into ``path`` (per ``actor.checkpoint.load_contents``),
        push the weights to the rollout engine and restore the engine's sampling state."""
        if not self.has_actor:
            return
        actor = self._actor_engine("load_checkpoint")
        contents = set(self.actor_config.checkpoint.load_contents)
        with actor.resident():
            extra = self._load_state(Path(path), actor, contents, f"{ACTOR}.checkpoint.load_contents")
        if extra is not None and self.shuffle_generator is not None and "shuffle_generator" in extra:
            self.shuffle_generator.set_state(extra["shuffle_generator"])
        if self.has_rollout:
            self._transport().reset()  # the engine's weights are not the ones the transport last sent
            self.sync_weights()
            engine = self.rollout_engine
            if extra is not None and "rollout" in extra and isinstance(engine, SupportsSamplingState):
                engine.load_state_dict(extra["rollout"])
