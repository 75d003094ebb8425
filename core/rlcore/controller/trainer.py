"""The single controller: the whole PPO/GRPO step as plain Python, workers do the heavy lifting.

The step order follows verl's ``RayPPOTrainer.fit``: generate → reward → batch filters → balance → old
log-probs → reference log-probs → values → KL-in-reward → advantages → critic update → actor update (after
``critic_warmup``) → weight sync → validation every ``test_freq`` → checkpoint every ``save_freq`` →
metrics. The trainer looks nothing up: every component it calls arrives resolved, in the run's
:class:`~rlcore.controller.components.RunComponents`.
"""

from __future__ import annotations

import json
import logging
import time
from functools import partial
from pathlib import Path
from typing import Any

import click
import numpy as np
from omegaconf import DictConfig

from rlcore.agents.seam import run_multi_turn
from rlcore.algos.functional import agg_loss
from rlcore.algos.kl_control import apply_kl_penalty, make_kl_controller
from rlcore.algos.metrics import (
    compute_data_metrics,
    compute_memory_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
)
from rlcore.algos.pf_ppo import pf_ppo_resample
from rlcore.algos.rollout_correction import apply_rollout_correction
from rlcore.api.batch import Batch
from rlcore.api.training import ROUTED_EXPERTS
from rlcore.checkpoint import (
    CheckpointManager,
    claim_checkpoints,
    read_rollout_states,
    read_trainer_state,
    resume_path,
    write_rollout_states,
    write_trainer_state,
)
from rlcore.checkpoint.callback import load_checkpoint_callback
from rlcore.checkpoint.fingerprint import accept_checkpoint, model_shape, run_fingerprint
from rlcore.config.output_paths import shown_path
from rlcore.config.plugin_sections import plugin_section
from rlcore.config.schema import AlgorithmConfig, RewardModelConfig, Sections
from rlcore.controller.components import RunComponents
from rlcore.controller.groups import build_worker_groups
from rlcore.controller.health import Actions, HealthLoop
from rlcore.controller.off_policy import RolloutPipeline
from rlcore.controller.resume import unfinished_checkpoint
from rlcore.controller.rollout_skip import RolloutSkip
from rlcore.controller.uids import prompt_uids
from rlcore.data.collate import collate_rows
from rlcore.data.custom import load_dataset_class
from rlcore.data.loader import PromptLoader
from rlcore.data.sampler import build_sampler, update_curriculum
from rlcore.errors import RLCoreError
from rlcore.graceful_stop import StopRequest
from rlcore.plugins import PluginManager, run_profiler
from rlcore.processors import load_processor
from rlcore.reward.async_reward import AsyncReward, PendingReward
from rlcore.reward.extras import check_reward_extras
from rlcore.reward.model_reward import ModelRewardManager
from rlcore.reward.scoring import build_reward_manager, describe_scorer
from rlcore.run_context import RunContext
from rlcore.tracking.flops import flops_model, mfu_metrics
from rlcore.tracking.generations import dump_generations
from rlcore.tracking.progress import ProgressBar
from rlcore.tracking.sinks import build_trackers
from rlcore.tracking.timer import StageTimer
from rlcore.tracking.values import reduce_metrics
from rlcore.workers.balance import balance_order, group_balance_order

log = logging.getLogger(__name__)

#: the metrics that count optimizer steps skipped for a non-finite loss or gradient norm (the workers' ppo loop)
NONFINITE_METRICS: tuple[str, ...] = ("actor/grad_norm_nonfinite", "critic/grad_norm_nonfinite")
#: a reward above this magnitude is counted in ``reward/extreme_scores`` and warned about (rule rewards are O(1))
REWARD_WARN_MAGNITUDE = 1e4


def load_model_config(model_path: str, trust_remote_code: bool = False) -> Any | None:
    """The Hugging Face config of the model at ``model_path``, or None when it cannot be loaded (the model
    check before the run reports a broken model)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - transformers raises many types; reported by the model check
        return None


class Trainer:
    """Drives one run: builds datasets, workers, reward and trackers from the config and the run's resolved
    ``components``, then ``fit()``."""

    def __init__(self, config: DictConfig, run: RunContext, manager: PluginManager, components: RunComponents) -> None:
        self.config = config
        #: the typed sections of ``config``, built once for the run (:class:`rlcore.config.schema.Sections`)
        self.sections = Sections.from_tree(config)
        self.run = run
        self.manager = manager
        self.components = components
        #: the ``algorithm`` section the advantage estimator receives: the core's fields and the plugins' there
        self.algorithm_section = plugin_section(config, AlgorithmConfig, manager)
        algo = config.algorithm
        self.estimator = components.estimator
        self.use_critic = (
            bool(config.critic.enable) if config.critic.enable is not None else self.estimator.spec.needs_critic
        )
        if self.estimator.spec.needs_critic and not self.use_critic:
            raise RLCoreError(f"algorithm.adv_estimator={algo.adv_estimator!r} needs a critic but critic.enable=false")
        actor = config.actor_rollout_ref.actor
        self.use_reference = bool(actor.use_kl_loss or algo.use_kl_in_reward)
        self.kl_ctrl = make_kl_controller(self.sections.algorithm.kl_ctrl) if algo.use_kl_in_reward else None
        self.n = int(self.sections.actor_rollout_ref.rollout.n)
        self.global_step = 0
        self.timer = StageTimer()
        self.async_reward = bool(config.reward_model.launch_reward_fn_async)
        self.reward_model_worker = self.estimator.spec.reward_model_worker  # e.g. PRIME's implicit PRM
        self.reward_extra_keys: tuple[str, ...] = ()  # the per-sample extras the reward function returned
        self.use_reward_model = bool(config.reward_model.enable) or self.reward_model_worker is not None
        self.extensions = components.extensions  # the plugins' worker groups, stages and loss terms
        self.nonfinite_in_a_row = 0
        self.stop = StopRequest(self.sections.trainer.stop_grace_s)
        self.saved_step = 0  # the step of the newest checkpoint this run saved or resumed from
        #: trainer.checkpoint_callback_class, built before training (None when not set)
        self.checkpoint_callback = load_checkpoint_callback(self.sections.trainer.checkpoint_callback_class)
        self.last: dict[str, float] = {}  # the last step's metrics (plus the last validation), also when stopped
        self.pipeline: RolloutPipeline | None = None  # trainer.v1 async modes / async_training: the sample buffer
        self.prepared = False  # prepare() has run
        self.resume_from: Path | None = None  # the checkpoint fit() resumes from (set by prepare())
        self.health = HealthLoop(config, manager.registry, run)  # the run-health monitors (trainer.monitors)
        self.rollout_skip = RolloutSkip.from_sections(self.sections)  # skip.rollout: replayed generations

    # ------------------------------------------------------------------ setup
    def _build_data(self) -> None:
        from transformers import AutoTokenizer

        cfg = self.config
        model = cfg.actor_rollout_ref.model
        self.model_config = load_model_config(model.path, bool(model.trust_remote_code))
        self.model_shape = model_shape(self.model_config.to_dict() if self.model_config is not None else {})
        source = model.tokenizer_path or model.path
        key = "actor_rollout_ref.model.tokenizer_path" if model.tokenizer_path else "actor_rollout_ref.model.path"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=model.trust_remote_code)
        except Exception as exc:  # transformers raises many types; the user needs one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise RLCoreError(
                f"{key}={source}: the tokenizer cannot be loaded ({type(exc).__name__}: {first}); point "
                f"{key} at a folder with tokenizer.json or tokenizer_config.json"
            ) from exc
        if model.custom_chat_template:
            self.tokenizer.chat_template = model.custom_chat_template
        self.agents = run_multi_turn(cfg, self.manager.registry, self.manager).runner(self.tokenizer)
        dataset_cls = load_dataset_class(self.sections.data, self.manager.registry)
        # a vision-language model's processor renders image rows (verl passes it to the dataset the same way)
        self.processor = load_processor(Path(str(model.path)).expanduser(), trust_remote_code=model.trust_remote_code)
        extra = {"processor": self.processor} if self.processor is not None else {}
        self.train_dataset = dataset_cls(cfg.data.train_files, self.tokenizer, cfg.data, split="train", **extra)
        self.train_loader = PromptLoader(
            self.train_dataset,
            cfg.data.gen_batch_size or cfg.data.train_batch_size,
            shuffle=cfg.data.shuffle,
            seed=cfg.data.seed if cfg.data.seed is not None else cfg.trainer.seed,
            sampler=build_sampler(self.sections.data.sampler, cfg.data, self.train_dataset),
        )
        self.val_dataset = (
            dataset_cls(cfg.data.val_files, self.tokenizer, cfg.data, split="test", **extra)
            if cfg.data.val_files
            else None
        )
        steps = cfg.trainer.total_training_steps
        self.total_steps = int(steps if steps is not None else len(self.train_loader) * cfg.trainer.total_epochs)
        cfg.actor_rollout_ref.actor.optim.total_training_steps = self.total_steps
        cfg.critic.optim.total_training_steps = self.total_steps

    def _build_workers(self) -> None:
        self.groups = build_worker_groups(
            self.config,
            use_reference=self.use_reference,
            use_critic=self.use_critic,
            use_reward_model=self.use_reward_model,
            reward_model_worker=self.reward_model_worker,
            extensions=self.extensions,
            transport=self.components.weight_transport.load() if self.components.weight_transport else None,
        )
        self.actor, self.rollout, self.critic = self.groups.actor, self.groups.rollout, self.groups.critic
        self.groups.init_models()
        self.reward_fn = build_reward_manager(
            self.sections,
            plugin_section(self.config, RewardModelConfig, self.manager),
            self.tokenizer,
            self.components.reward_manager.load(),
            self.manager.registry,
        )
        if self.groups.reward_model is not None:  # reward_model.enable: reward-model scores plus rule scores
            separate = "rm_scores" in self.estimator.spec.batch_keys
            self.reward_fn = ModelRewardManager(
                self.reward_fn,
                self.groups.reward_model,
                self.sections.custom_reward_function,
                self.manager.registry,
                separate,
            )
        self.val_reward_fn = self.reward_fn
        self.reward_thread = AsyncReward() if self.async_reward else None
        self.profiling = run_profiler(self.config, self.manager).step_profiler(self.groups)
        self.pipeline = RolloutPipeline.from_config(
            self.config,
            self.groups,
            self._collect_groups,
            self._prompt_batch,
            lambda: self.train_loader.epoch,
            self.total_steps,
            self._generation_rows,
        )
        self.flops = flops_model(self.model_config) if self.model_config is not None else None
        self.run.derived["device_peak"] = peak = self.actor.device_peak()
        self.run.save_derived()
        self.peak_flops = float(peak["tflops"]) * 1e12

    # ------------------------------------------------------------------- step
    def _prompt_batch(self) -> Batch:
        batch = self.train_loader.next_batch()
        loader = self.train_loader
        uids = prompt_uids(self.sections.trainer.seed, loader.epoch, loader.position, len(batch))
        batch["uid"] = np.array(uids, dtype=object)
        return batch

    def _generate(self, prompts: Batch, validate: bool = False, n: int | None = None) -> Batch:
        gen = prompts.repeat(n or self.n, interleave=True)
        gen.meta["validate"] = validate
        if self.agents.applies_to(gen):  # multi-turn: agent loops drive the engine turn by turn
            return self.agents.run(gen, self.rollout.generate_sequences)
        return self.rollout.generate_sequences(gen)

    def _score(self, batch: Batch, reward_fn: Any, metrics: dict[str, float]) -> None:
        self._apply_reward(batch, reward_fn(batch), metrics)

    def _apply_reward(self, batch: Batch, result: Any, metrics: dict[str, float]) -> None:
        """Put a reward manager's result into the batch and its metrics into ``metrics``."""
        batch["token_level_scores"] = result.token_level_scores
        scores = result.token_level_scores.double().sum(-1).abs()
        extreme = int((scores > REWARD_WARN_MAGNITUDE).sum())
        metrics["reward/extreme_scores"] = float(extreme)
        if extreme:
            log.warning(
                "%d of %d rewards exceed %g in magnitude (largest %.3g): check the reward function's "
                "scale (metric reward/extreme_scores)",
                extreme,
                len(scores),
                REWARD_WARN_MAGNITUDE,
                float(scores.max()),
            )
        check_reward_extras(result.extra_info, batch, describe_scorer(self.sections.custom_reward_function))
        for key, values in result.extra_info.items():  # per-sample extras (e.g. "acc") for filters and metrics
            batch[key] = list(values)
        self.reward_extra_keys = tuple(result.extra_info)  # ... and for estimators that read them (GDPO)
        for key, tensor in result.tensors.items():  # e.g. rm_scores for an estimator that reads them itself
            batch[key] = tensor
        metrics.update(result.metrics)

    def _apply_filters(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        for batch_filter in self.components.batch_filters:
            batch, filter_metrics = batch_filter.load()(batch, self.config)
            metrics.update(filter_metrics)
        return batch

    def _add_greedy_baseline(self, prompts: Batch, batch: Batch) -> None:
        """ReMax: score one greedy response per prompt; its reward is the baseline of the prompt's samples."""
        greedy_prompts = prompts.select(list(prompts.keys()))
        greedy_prompts.meta["do_sample"] = False
        greedy = self.rollout.generate_sequences(greedy_prompts)
        baseline = self.reward_fn(greedy).token_level_scores.sum(-1)
        batch["reward_baselines"] = baseline.repeat_interleave(self.n)

    def _generation_rows(self, prompts: Batch) -> Batch:
        """``prompts`` as the engine generates them (each repeated ``rollout.n`` times, the rollout temperature):
        what a partial rollout (``trainer.v1.partial_rollout_tokens``) starts from. Multi-turn agent loops drive the
        engine turn by turn and have no partial rollout: they are named in the error."""
        prompts.meta["temperature"] = self.sections.actor_rollout_ref.rollout.temperature
        gen = prompts.repeat(self.n, interleave=True)
        gen.meta["validate"] = False
        if self.agents.applies_to(gen):
            raise RLCoreError(
                "trainer.v1.partial_rollout_tokens: multi-turn agent loops (actor_rollout_ref.rollout.multi_turn) "
                "generate turn by turn and have no partial rollout; set it to null"
            )
        return gen

    def _generate_round(
        self,
        prompts: Batch,
        metrics: dict[str, float],
        timer: StageTimer,
        rounds: int | None = None,
        generated: Batch | None = None,
    ) -> Batch:
        """Generate ``prompts`` (stage ``gen``; round ``rounds`` of the synchronous step replays or caches it
        with ``skip.rollout``; ``generated``: the rows a partial rollout already generated), the ReMax baseline
        (``gen_max``) and, unless the reward runs async, score them (``reward``)."""
        prompts.meta["temperature"] = self.sections.actor_rollout_ref.rollout.temperature
        with timer("gen"):
            if generated is not None:
                batch = generated
            elif self.rollout_skip is None or rounds is None:
                batch = self._generate(prompts)
            else:
                batch = self.rollout_skip.generate(self.global_step, rounds, partial(self._generate, prompts))
        # the engine's own figures (rollout/gen_tokens, the HF engine's rollout/rows_per_chunk, ...):
        # per rank, averaged over ranks
        metrics.update(reduce_metrics(batch.meta.get("metrics", {})))
        metrics.update(batch.meta.pop("agent_metrics", {}))
        if self.estimator.spec.needs_greedy_baseline:
            with timer("gen_max"):
                self._add_greedy_baseline(prompts, batch)
        if not self.async_reward:  # scored in the background by train_step (never with filters: see validate)
            with timer("reward"):
                self._score(batch, self.reward_fn, metrics)
        return batch

    def _collect_groups(
        self, prompts: Batch, metrics: dict[str, float], timer: StageTimer, generated: Batch | None = None
    ) -> Batch:
        """One generation round of an asynchronous run (:mod:`rlcore.controller.off_policy`; ``generated``: the
        rows a partial rollout generated): the rows of the prompt groups the batch filters keep (all of them
        without filters)."""
        batch = self._generate_round(prompts, metrics, timer, generated=generated)
        if self.async_reward or not self.sections.algorithm.batch_filters:
            return batch
        return self._apply_filters(batch, metrics)

    def _collect_batch(self, metrics: dict[str, float], timer: StageTimer | None = None) -> Batch:
        """Generate and score rollouts. With batch filters, generate more rounds until
        ``data.train_batch_size`` prompt groups survive (DAPO's dynamic sampling), at most
        ``algorithm.max_num_gen_batches`` rounds, then keep exactly that many groups. The stages are timed on
        ``timer`` (the step's by default)."""
        timer = timer or self.timer
        target = int(self.sections.data.train_batch_size)
        max_rounds = int(self.sections.algorithm.max_num_gen_batches)
        filtering = bool(self.sections.algorithm.batch_filters)
        kept: list[Batch] = []
        prompts_kept = 0
        rounds = 0
        while True:
            rounds += 1
            batch = self._generate_round(self._prompt_batch(), metrics, timer, rounds)
            if self.async_reward or not filtering:
                return batch
            batch = self._apply_filters(batch, metrics)
            if len(batch):
                kept.append(batch)
                prompts_kept += len(set(batch["uid"]))
            if prompts_kept >= target:
                break
            if 0 < max_rounds <= rounds:
                raise RLCoreError(
                    f"the batch filters ({', '.join(self.sections.algorithm.batch_filters)}) kept {prompts_kept} of the "
                    f"{target} prompt groups a step needs after {rounds} generation rounds "
                    f"(algorithm.max_num_gen_batches={max_rounds}); raise the limit or check the reward"
                )
        batch = kept[0] if len(kept) == 1 else Batch.concat(kept)
        groups = list(dict.fromkeys(batch["uid"]))[:target]
        batch = batch[np.isin(batch["uid"], groups)]
        metrics["batch_filter/gen_rounds"] = float(rounds)
        metrics["batch_filter/kept_prompts"] = float(prompts_kept)
        return batch

    def _apply_kl_in_reward(self, batch: Batch, metrics: dict[str, float]) -> None:
        if self.kl_ctrl is None:
            batch["token_level_rewards"] = batch["token_level_scores"]
            return
        rewards, kl_metrics = apply_kl_penalty(
            batch["token_level_scores"],
            batch["old_log_probs"],
            batch["ref_log_prob"],
            batch["response_mask"],
            self.kl_ctrl,
            self.sections.algorithm.kl_penalty,
        )
        batch["token_level_rewards"] = rewards
        metrics.update(kl_metrics)

    def _compute_advantage(self, batch: Batch) -> None:
        kwargs: dict[str, Any] = {
            "token_level_rewards": batch["token_level_rewards"],
            "response_mask": batch["response_mask"],
            "index": batch["uid"],
            "config": self.algorithm_section,
        }
        if "values" in batch:
            kwargs["values"] = batch["values"]
        if "reward_baselines" in batch:
            kwargs["reward_baselines"] = batch["reward_baselines"]
        kwargs["reward_extras"] = {key: batch[key] for key in self.reward_extra_keys if key in batch}
        for key in self.estimator.spec.batch_keys:  # what the estimator declares it reads
            kwargs[key] = batch[key]
        for key in self.estimator.spec.optional_batch_keys:  # ... and reads when the batch has it
            if key in batch:
                kwargs[key] = batch[key]
        advantages, returns = self.estimator.load()(**kwargs)
        batch["advantages"] = advantages
        batch["returns"] = returns

    def _run_extensions(self, batch: Batch, metrics: dict[str, float]) -> None:
        """The step extensions' stages (:mod:`rlcore.api.extensions`): each group's method adds its tensors
        to ``batch`` and its ``meta["metrics"]`` to ``metrics``, timed as ``timing_s/<name>``."""
        for extension in self.extensions:
            if extension.method is None:
                continue
            with self.timer(extension.name):
                out = getattr(self.groups.extensions[extension.name], extension.method)(batch)
            for key in out.tensors:
                batch[key] = out[key]
            metrics.update(reduce_metrics(out.meta.get("metrics", {})))

    def _on_policy_update(self, batch: Batch) -> bool:
        """Whether the actor update is one optimizer step on exactly the policy that generated ``batch``
        (one PPO epoch, one mini-batch, nothing before the update reads ``old_log_probs`` or ``sum_pi_squared``). Then the
        recomputed old log-probs equal the update's own detached log-probs, and the worker uses those
        instead of a separate forward pass (``batch.meta["on_policy"]``)."""
        actor = self.sections.actor_rollout_ref.actor
        return (
            int(actor.ppo_epochs) == 1
            and int(actor.ppo_mini_batch_size) >= int(self.sections.data.train_batch_size)
            and self.kl_ctrl is None
            and "rollout_log_probs" not in batch
            and self._actor_trains()
            and "old_log_probs" not in self.estimator.spec.batch_keys
            and not actor.calculate_sum_pi_squared
        )

    def _actor_trains(self) -> bool:
        """Whether this step updates the actor (and so syncs the rollout's weights): from step
        ``trainer.critic_warmup`` on."""
        return self.sections.trainer.critic_warmup <= self.global_step

    def train_step(self) -> dict[str, float]:
        """Run one RL step and return its metrics (verl's names).

        The step is its list of stages, in verl's order. Each stage is a method below that decides whether it
        runs for this config (a critic, a reference model, an async reward, ...); a stage that calls workers
        times itself as ``timing_s/<name>``. The step's own figures come last (:meth:`_step_metrics`).
        """
        metrics: dict[str, float] = {}
        self.groups.pop_compute_s()  # drop worker time and memory outside steps (validation, checkpoints)
        self.groups.pop_peak_memory_gb()
        step_start = time.perf_counter()
        batch = self._collect(metrics)
        self._balance(batch, metrics)
        reward = self._launch_reward(batch)
        log_prob_lengths = batch["attention_mask"].sum(-1).tolist()  # the MFU's, before PF-PPO resamples
        self._old_log_prob(batch, metrics)
        self._rollout_correction(batch, metrics)
        self._ref(batch)
        self._values(batch)
        self._reward(batch, reward, metrics)
        self._run_extensions(batch, metrics)
        self._dump_rollouts(batch)
        batch = self._advantages(batch, metrics)
        self._update_critic(batch, metrics)
        self._update_actor(batch, metrics)
        self._sync_weights(metrics)
        update_curriculum(self.train_loader.sampler, batch)
        self._step_metrics(batch, metrics, time.perf_counter() - step_start, log_prob_lengths)
        self.health.take_samples(batch, self._decoded, self.reward_extra_keys)
        return metrics

    # ------------------------------------------------------------ step stages
    def _collect(self, metrics: dict[str, float]) -> Batch:
        """Stage ``gen`` (timed where it generates): the step's batch. In an asynchronous run it is sampled from
        the buffer (:meth:`~rlcore.controller.off_policy.RolloutPipeline.next_batch`, which also gives the
        epoch); otherwise :meth:`_collect_batch` generates it now and, unless the reward
        runs async, scores it and applies the batch filters (regenerating while they drop prompt groups)."""
        if self.pipeline is None:
            return self._collect_batch(metrics)
        batch, epoch = self.pipeline.next_batch(self.global_step, metrics)
        metrics["training/epoch"] = epoch
        return batch

    def _balance(self, batch: Batch, metrics: dict[str, float]) -> None:
        """``trainer.balance_batch``: reorder ``batch`` so that every data-parallel rank of the actor gets about
        as many tokens as the others; with ``actor.use_prefix_grouper`` a prompt's samples stay together."""
        if not self.sections.trainer.balance_batch:
            return
        lengths = batch["attention_mask"].sum(-1)
        if self.sections.actor_rollout_ref.actor.use_prefix_grouper:
            order, balance_metrics = group_balance_order(lengths, list(batch["uid"]), self.actor.dp_size)
        else:
            order, balance_metrics = balance_order(lengths, self.actor.dp_size)
        batch.reorder(order)
        metrics.update(balance_metrics)

    def _launch_reward(self, batch: Batch) -> PendingReward | None:
        """``reward_model.launch_reward_fn_async``: start scoring ``batch`` in the background while the
        log-probs and values are computed (:meth:`_reward` waits for it); None when the reward is not async."""
        if self.reward_thread is None:
            return None
        return self.reward_thread.submit(self.reward_fn, batch)

    def _old_log_prob(self, batch: Batch, metrics: dict[str, float]) -> None:
        """Stage ``old_log_prob``: the log-probs of the policy that generated ``batch`` and ``actor/entropy``.
        No forward pass when the update is on-policy (:meth:`_on_policy_update`: the worker takes them from
        the update) or with ``rollout_correction.bypass_mode`` (the engine's log-probs are the old policy)."""
        if self._on_policy_update(batch):
            batch.meta["on_policy"] = True
            return
        if self.config.algorithm.rollout_correction.bypass_mode:
            batch["old_log_probs"] = batch["rollout_log_probs"]
            return
        with self.timer("old_log_prob"):
            out = self.actor.compute_log_prob(batch)
            metrics["actor/entropy"] = agg_loss(
                out["entropys"], batch["response_mask"], self.sections.actor_rollout_ref.actor.loss_agg_mode
            ).item()
            batch["old_log_probs"] = out["old_log_probs"]
            if "sum_pi_squared" in out:  # actor.calculate_sum_pi_squared
                batch["sum_pi_squared"] = out["sum_pi_squared"]
            if ROUTED_EXPERTS in out:  # router_replay.mode=R2: the update replays this pass's routing
                batch[ROUTED_EXPERTS] = out[ROUTED_EXPERTS]

    def _rollout_correction(self, batch: Batch, metrics: dict[str, float]) -> None:
        """When the engine returned its own log-probs (``rollout_log_probs``): the rollout correction's
        importance weights and rejections (``algorithm.rollout_correction``, :mod:`rlcore.algos.rollout_correction`)."""
        if "rollout_log_probs" in batch:
            metrics.update(apply_rollout_correction(batch, self.sections.algorithm.rollout_correction))

    def _ref(self, batch: Batch) -> None:
        """Stage ``ref``: the reference policy's log-probs, when a KL loss or KL-in-reward needs them."""
        if not self.use_reference:
            return
        with self.timer("ref"):
            batch["ref_log_prob"] = self.actor.compute_ref_log_prob(batch)["ref_log_prob"]

    def _values(self, batch: Batch) -> None:
        """Stage ``values``: the critic's values, when the run has a critic."""
        if self.critic is None:
            return
        with self.timer("values"):
            batch["values"] = self.critic.compute_values(batch)["values"]

    def _reward(self, batch: Batch, pending: PendingReward | None, metrics: dict[str, float]) -> None:
        """Stage ``reward`` of an async reward: wait for the score :meth:`_launch_reward` started and put it in
        ``batch`` (a synchronous reward was scored by :meth:`_collect_batch`)."""
        if pending is None:
            return
        with self.timer("reward"):
            self._apply_reward(batch, pending.result(metrics), metrics)

    def _advantages(self, batch: Batch, metrics: dict[str, float]) -> Batch:
        """Stage ``adv``: the KL penalty in the reward, the estimator's advantages and returns, then PF-PPO's
        resampling by reward reliability (``algorithm.use_pf_ppo``); returns the batch to train on."""
        with self.timer("adv"):
            self._apply_kl_in_reward(batch, metrics)
            self._compute_advantage(batch)
            if self.sections.algorithm.use_pf_ppo:
                batch, pf_metrics = pf_ppo_resample(
                    batch, self.sections.algorithm.pf_ppo, int(self.sections.trainer.seed) + self.global_step
                )
                metrics.update(pf_metrics)
        return batch

    def _update_critic(self, batch: Batch, metrics: dict[str, float]) -> None:
        """Stage ``update_critic``: the critic's PPO update, when the run has a critic."""
        if self.critic is None:
            return
        with self.timer("update_critic"):
            metrics.update(reduce_metrics(self.critic.update_critic(batch).meta.get("metrics", {})))

    def _update_actor(self, batch: Batch, metrics: dict[str, float]) -> None:
        """Stage ``update_actor``: the actor's PPO update, once the critic's warm-up is over."""
        if not self._actor_trains():
            return
        with self.timer("update_actor"):
            metrics.update(reduce_metrics(self.actor.update_actor(batch).meta.get("metrics", {})))

    def _sync_weights(self, metrics: dict[str, float]) -> None:
        """Stage ``update_weights``: after an actor update, the rollout engines get the new weights; in an
        asynchronous run through the pipeline (with a rollout lane: loaded after its current generation)."""
        if not self._actor_trains():
            return
        with self.timer("update_weights"):
            if self.pipeline is not None:
                metrics.update(self.pipeline.push_weights())
            else:
                metrics.update(reduce_metrics(self.groups.sync_weights()))

    def _step_metrics(
        self, batch: Batch, metrics: dict[str, float], step_time: float, log_prob_lengths: list[int]
    ) -> None:
        """Add the step's own figures to ``metrics``: the workers' time (``timing_worker_s/*``,
        ``timing_s/outside_worker``), the batch's data metrics, the stages' ``timing_s/*`` and the step's,
        throughput, MFU (with a known model), peak memory, the global step and the epoch."""
        timing = {**self.timer.pop_all(), "step": step_time}
        worker_s = self.groups.pop_compute_s()
        metrics.update({f"timing_worker_s/{method}": seconds for method, seconds in worker_s.items()})
        outside = step_time - sum(worker_s.values())
        metrics["timing_s/outside_worker"] = outside
        metrics["perf/outside_worker_share"] = outside / step_time if step_time > 0 else 0.0
        metrics.update(compute_data_metrics(batch, use_critic=self.critic is not None))
        n_prompt = int(batch["attention_mask"][:, : batch["prompts"].shape[1]].sum())
        n_response = int(batch["response_mask"].sum())
        metrics.update(compute_timing_metrics(timing, n_prompt, n_response))
        metrics.update(compute_throughput_metrics(n_prompt + n_response, step_time, self.actor.world_size))
        if self.flops is not None:
            lengths = {"old_log_prob": log_prob_lengths, "ref": log_prob_lengths}
            lengths["actor"] = batch["attention_mask"].sum(-1).tolist()  # PF-PPO may have resampled the batch
            epochs = int(self.sections.actor_rollout_ref.actor.ppo_epochs)
            metrics.update(mfu_metrics(self.flops, lengths, worker_s, self.peak_flops, self.actor.world_size, epochs))
        metrics.update(compute_memory_metrics(self.groups.pop_peak_memory_gb()))
        metrics["training/global_step"] = self.global_step
        metrics.setdefault("training/epoch", self.train_loader.epoch)

    def _decoded(self, batch: Batch) -> tuple[list[str], list[str]]:
        """The prompts and valid responses of ``batch`` as text."""
        prompts = self.tokenizer.batch_decode(batch["prompts"], skip_special_tokens=True)
        responses = self.tokenizer.batch_decode(
            [row[mask.bool()] for row, mask in zip(batch["responses"], batch["response_mask"])],
            skip_special_tokens=True,
        )
        return prompts, responses

    def _dump(self, folder: str, step: int, batch: Batch) -> None:
        """Write the batch's generations to ``<folder>/<step>.jsonl`` (verl's format)."""
        prompts, responses = self._decoded(batch)
        truths = [rm.get("ground_truth") if isinstance(rm, dict) else None for rm in batch["reward_model"]]
        scores = batch["token_level_scores"].sum(-1).tolist()
        extras = {
            key: list(batch[key])
            for key in batch.non_tensors
            if key not in ("uid", "data_source", "reward_model", "extra_info", "raw_prompt", "raw_prompt_ids", "index")
        }
        dump_generations(folder, step, prompts, responses, truths, scores, extras)

    def _dump_rollouts(self, batch: Batch) -> None:
        """``trainer.rollout_data_dir``: this step's generations, one JSON line per response."""
        folder = self.sections.trainer.rollout_data_dir
        if folder:
            self._dump(folder, self.global_step, batch)

    # ------------------------------------------------------------- validation
    def _val_batches(self) -> list[Batch]:
        dataset = self.val_dataset
        if dataset is None:
            raise RLCoreError("validation needs a validation set: set data.val_files")
        size = self.sections.data.val_batch_size or len(dataset)
        return [
            collate_rows([dataset[i] for i in range(s, min(s + size, len(dataset)))])
            for s in range(0, len(dataset), size)
        ]

    def validate(self) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Greedy (``val_kwargs``) generation on the validation set.

        Returns the metrics ``val-core/<source>/reward/mean@N`` (and ``val-aux/.../std@N`` when N > 1) and
        the first ``trainer.log_val_generations`` samples as ``{"prompt", "response", "score"}`` rows.
        """
        n = int(self.sections.actor_rollout_ref.rollout.val_kwargs.n)
        sources: list[str] = []
        scores: list[float] = []
        samples: list[dict[str, Any]] = []
        metrics: dict[str, float] = {}
        outputs: list[Batch] = []
        agent_metrics: list[dict[str, float]] = []
        for prompts in self._val_batches():
            prompts.meta["temperature"] = self.sections.actor_rollout_ref.rollout.val_kwargs.temperature
            out = self._generate(prompts, validate=True, n=n)
            agent_metrics.append(out.meta.pop("agent_metrics", {}))
            self._score(out, self.val_reward_fn, metrics)
            outputs.append(out)
            seq_scores = out["token_level_scores"].sum(-1).tolist()
            sources += [str(s) for s in out["data_source"]]
            scores += seq_scores
            wanted = self.sections.trainer.log_val_generations - len(samples)
            if wanted > 0:
                prompts_text = self.tokenizer.batch_decode(out["prompts"][:wanted], skip_special_tokens=True)
                responses = self.tokenizer.batch_decode(out["responses"][:wanted], skip_special_tokens=True)
                samples += [
                    {"prompt": p, "response": r, "score": s}
                    for p, r, s in zip(prompts_text, responses, seq_scores[:wanted])
                ]
        if self.sections.trainer.validation_data_dir:
            self._dump(
                self.sections.trainer.validation_data_dir,
                self.global_step,
                outputs[0] if len(outputs) == 1 else Batch.concat(outputs),
            )
        by_source: dict[str, list[float]] = {}
        for source, score in zip(sources, scores):
            by_source.setdefault(source, []).append(score)
        val: dict[str, float] = {}
        for source, values in by_source.items():
            arr = np.asarray(values, dtype=np.float64)
            val[f"val-core/{source}/reward/mean@{n}"] = float(arr.mean())
            if n > 1:
                val[f"val-aux/{source}/reward/std@{n}"] = float(arr.std())
        for key in agent_metrics[0] if agent_metrics and agent_metrics[0] else ():
            val[f"val-aux/{key}"] = float(np.mean([m[key] for m in agent_metrics]))
        return val, samples

    # -------------------------------------------------------------- checkpoint
    def save_checkpoint(self) -> Path:
        """Save ``default_local_dir/global_step_N`` atomically (:meth:`rlcore.checkpoint.CheckpointManager.save`):
        the workers' parts in ``actor/`` and ``critic/``, ``trainer_state.json`` with the global step,
        the data loader position and the in-reward KL coefficient, and the run-health monitors' history. Then ``trainer.checkpoint_callback_class``'s
        ``on_save(path, step)`` is called (:mod:`rlcore.checkpoint.callback`)."""

        def write(folder: Path) -> None:
            """Make the workers and the controller write their parts into ``folder``."""
            if self.pipeline is not None:  # first: it waits for the batches in flight, which move the loader
                self.pipeline.save(folder)
            if self.groups.split:  # rollout-only ranks save nothing themselves; their sampling state goes here
                write_rollout_states(folder, self.groups.rollout.call_all("rollout_state"))
            self.actor.save_checkpoint(str(folder / "actor"))
            if self.critic is not None:
                self.critic.save_checkpoint(str(folder / "critic"))
            kl_coef = None if self.kl_ctrl is None else self.kl_ctrl.value
            state = {"global_step": self.global_step, "data": self.train_loader.state_dict(), "kl_coef": kl_coef}
            write_trainer_state(folder, state)
            self.health.save(folder)

        path = CheckpointManager(self.sections.trainer, self.run.identity).save(self.global_step, write)
        self.saved_step = self.global_step
        if self.checkpoint_callback is not None:
            self.checkpoint_callback.on_save(path, self.global_step)
        return path

    def load_checkpoint(self, path: Path) -> None:
        """Restore a checkpoint written by :meth:`save_checkpoint`: the workers, the data loader, the KL
        coefficient, the run-health monitors' history and the global step (training continues with step N+1);
        notes it in ``resume.json``."""
        state = read_trainer_state(path)
        self.actor.load_checkpoint(str(path / "actor"))
        if self.critic is not None:
            self.critic.load_checkpoint(str(path / "critic"))
        if self.groups.split:  # a colocated actor re-syncs its own engine; a separate rollout group must be told
            self.groups.sync_weights()
            rollout_states = read_rollout_states(path)
            if rollout_states is not None:
                self.groups.rollout.load_rollout_state(rollout_states)
        self.train_loader.load_state_dict(state["data"])
        if self.pipeline is not None:
            self.pipeline.load(path, int(state["global_step"]))
        if self.kl_ctrl is not None and state.get("kl_coef") is not None:
            self.kl_ctrl.value = float(state["kl_coef"])
        self.global_step = self.saved_step = int(state["global_step"])
        self.health.load(path)
        (self.run.run_dir / "resume.json").write_text(json.dumps({"path": str(path), "step": self.global_step}))
        click.echo(f"resumed from {path} (step {self.global_step} of {self.total_steps})")

    def fingerprint(self) -> dict[str, Any]:
        """What defines this run (:func:`rlcore.checkpoint.fingerprint.run_fingerprint`): the model, its weights,
        the tokenizer, the algorithm that runs (the estimator under its registered name, the policy loss and its
        aggregation, the batch filters, the reward manager, the KL terms), the training files and the model's
        shape. Call it after :meth:`_build_data`."""
        model = self.sections.actor_rollout_ref.model
        actor = self.config.actor_rollout_ref.actor
        algo = self.config.algorithm
        algorithm = {
            "adv_estimator": self.estimator.name,
            "policy_loss": str(actor.policy_loss.loss_mode),
            "loss_agg_mode": str(actor.loss_agg_mode),
            "batch_filters": [str(name) for name in algo.batch_filters],
            "reward_manager": str(self.config.reward_model.reward_manager),
            "use_kl_loss": bool(actor.use_kl_loss),
            "kl_loss_type": str(actor.kl_loss_type) if actor.use_kl_loss else None,
            "use_kl_in_reward": bool(algo.use_kl_in_reward),
            "kl_penalty": str(algo.kl_penalty) if algo.use_kl_in_reward else None,
        }
        return run_fingerprint(
            "rl",
            model_path=str(model.path),
            tokenizer_path=model.tokenizer_path,
            algorithm=algorithm,
            train_files=self.sections.data.train_files,
            shape=self.model_shape,
        )

    # -------------------------------------------------------------------- fit
    def fit(self) -> dict[str, float]:
        """Train for ``total_steps``; returns the last step's metrics (plus the last validation).

        Resumes first when ``trainer.resume_mode`` selects a checkpoint (:func:`rlcore.checkpoint.resume_path`);
        a resumed run skips ``val_before_train`` (the checkpoint's step was logged by the interrupted run)
        unless ``val_only``, and its steps, ``test_freq`` and ``save_freq`` continue from the global step.
        """
        with self.stop:
            return self._fit()

    def prepare(self) -> None:
        """What can fail before any worker starts, done once: the checkpoint to resume (a bad resume setting
        fails here), the tokenizer and the datasets. ``rlcore run`` calls it before it creates the run
        directory; :meth:`fit` calls it when nobody did."""
        if self.prepared:
            return
        resume_from = resume_path(self.sections.trainer)
        self._build_data()
        trainer = self.sections.trainer
        fingerprint = self.fingerprint()
        if self.run.identity is not None:
            self.run.identity.fingerprint = fingerprint
        if resume_from is not None:  # only a checkpoint of this run's kind, model, data and algorithm
            resume_from = accept_checkpoint(
                resume_from, fingerprint, resume_mode=trainer.resume_mode, allow=trainer.resume_allow_changes
            )
        if resume_from is not None and self.use_critic and not (resume_from / "critic").is_dir():
            raise RLCoreError(
                f"{resume_from} holds no critic/: its run trained without a critic, and this run's "
                f"algorithm.adv_estimator={self.estimator.name} needs one; set trainer.resume_mode=disable to start over"
            )
        if resume_from is not None and not trainer.val_only:
            step = int(read_trainer_state(resume_from)["global_step"])
            resume_from = unfinished_checkpoint(resume_from, step, self.total_steps, trainer.resume_mode)
        if self.run.identity is not None:  # another lineage's checkpoints are never replaced
            claim_checkpoints(self.sections.trainer, self.run.identity, resume_from)
        self.resume_from = resume_from
        self.prepared = True

    def _fit(self) -> dict[str, float]:
        self.prepare()
        resume_from = self.resume_from
        click.echo(f"starting the workers: loading {self.sections.actor_rollout_ref.model.path} ...")
        self._build_workers()
        cfg = self.config.trainer
        trackers = build_trackers(self.config, self.run.run_dir, self.manager.registry)
        hook = self.manager.hook
        hook.on_run_start(run=self.run)
        status = "failed"
        last = self.last
        save_time: float | None = None
        try:
            if resume_from is not None:
                self.load_checkpoint(resume_from)
            with ProgressBar(self.total_steps, enabled=cfg.progress_bar, initial_step=self.global_step) as bar:
                validate_first = cfg.val_only or (cfg.val_before_train and resume_from is None)
                if self.val_dataset is not None and validate_first:
                    with bar.phase("validating before training"):
                        val = self._validate_and_report(self.global_step, trackers)
                    trackers.log(val, step=self.global_step)
                    self.health.record(self.global_step, val)
                    bar.update(self.global_step, val)
                    last.update(val)
                    if cfg.val_only:
                        status = "completed"
                        return last
                for step in range(self.global_step + 1, self.total_steps + 1):
                    if self.stop.requested:
                        break
                    self.global_step = step
                    self.profiling.before_step(step, self.total_steps)
                    metrics = self.train_step()
                    self.profiling.after_step(step, self.total_steps)
                    self._count_nonfinite(metrics)
                    is_last = step == self.total_steps
                    if self.val_dataset is not None and cfg.test_freq > 0 and (is_last or step % cfg.test_freq == 0):
                        with bar.phase(f"validating after step {step}"):
                            metrics.update(self._validate_and_report(step, trackers))
                    if save_time is not None:
                        metrics["timing_s/save_checkpoint"] = save_time  # the previous step's save
                        save_time = None
                    hook.on_step_end(run=self.run, step=step, metrics=metrics)
                    health = self.health.check(step, metrics)  # adds health/<monitor>/* to the step's metrics
                    trackers.log(metrics, step=step)  # written and flushed before the checkpoint is committed
                    bar.update(step, metrics)
                    last.update(metrics)
                    self._stop_if_nonfinite(step)
                    if cfg.save_freq > 0 and (is_last or step % cfg.save_freq == 0):
                        with bar.phase(f"saving the checkpoint of step {step}"):
                            save_time = self._save_and_report(step)
                    self._act_on_health(health, step, bar)
            if self.stop.requested:
                status = "interrupted"
                if cfg.save_on_signal and self.global_step > self.saved_step:
                    self._save_and_report(self.global_step)
            else:
                if cfg.save_final_model:
                    self.save_final_model()
                status = "completed"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            trackers.finish()
            hook.on_run_end(run=self.run, status=status)
            if self.reward_thread is not None:
                self.reward_thread.shutdown()
            close = getattr(self.reward_fn, "close", None)
            if callable(close):
                close()
            if self.pipeline is not None:
                self.pipeline.close(wait=status == "completed")
            self.groups.shutdown()
        return last

    def save_final_model(self) -> Path:
        """Write the actor's weights as a Hugging Face model (with the tokenizer) to the run's
        :attr:`~rlcore.run_context.RunContext.final_model` folder (``trainer.save_final_model``); returns it."""
        folder = self.run.final_model
        click.echo(f"saving the final model to {shown_path(folder)} ...")
        self.actor.save_model(str(folder))
        return folder

    def _save_and_report(self, step: int) -> float:
        """Save the checkpoint of ``step``, call ``on_checkpoint_saved``; returns the seconds it took."""
        with self.timer("save_checkpoint"):
            path = self.save_checkpoint()
        self.manager.hook.on_checkpoint_saved(run=self.run, step=step, path=str(path))
        return self.timer.pop_all()["save_checkpoint"]

    def _act_on_health(self, actions: Actions, step: int, bar: ProgressBar) -> None:
        """After a logged step with run-health findings: save a checkpoint for a ``checkpoint`` or ``stop``
        action (unless this step's was just saved), then end the run for ``stop``
        (:class:`~rlcore.controller.health.HealthStop`)."""
        if actions.saving and self.saved_step != step:
            with bar.phase(f"saving the checkpoint of step {step} (run health)"):
                self._save_and_report(step)
        error = actions.stop_error(step)
        if error is not None:
            raise error

    def _count_nonfinite(self, metrics: dict[str, float]) -> None:
        """Count steps in a row whose update was skipped for a non-finite loss or gradient norm
        (``training/nonfinite_steps_in_a_row``)."""
        skipped = sum(float(metrics.get(key, 0.0) or 0.0) for key in NONFINITE_METRICS)
        self.nonfinite_in_a_row = self.nonfinite_in_a_row + 1 if skipped > 0 else 0
        metrics["training/nonfinite_steps_in_a_row"] = float(self.nonfinite_in_a_row)

    def _stop_if_nonfinite(self, step: int) -> None:
        """Stop after ``trainer.max_nonfinite_steps`` steps in a row with skipped updates."""
        limit = int(self.sections.trainer.max_nonfinite_steps)
        if self.nonfinite_in_a_row >= limit:
            first = step - self.nonfinite_in_a_row + 1
            raise RLCoreError(
                f"steps {first}-{step}: the loss or gradient norm was not finite in {self.nonfinite_in_a_row} steps "
                f"in a row (trainer.max_nonfinite_steps={limit}); those updates were skipped and nothing non-finite "
                "was saved. Check the rewards (critic/score/*), lower the learning rate, or resume from the last "
                "checkpoint"
            )

    def _validate_and_report(self, step: int, trackers: Any) -> dict[str, float]:
        if self.pipeline is not None:  # validate with the trainer's current weights
            self.pipeline.drain()
        start = time.perf_counter()
        val, samples = self.validate()
        val["timing_s/testing"] = time.perf_counter() - start
        if samples:
            trackers.log_table("val_generations", samples, step=step)
        self.manager.hook.on_validation_end(run=self.run, step=step, metrics=val)
        return val
