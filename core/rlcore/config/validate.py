"""Checks that need more than one key, and the derived quantities printed before a run starts.

Everything here runs before any worker, model or dataset is created, so a bad batch size costs the user
seconds, not a queue slot.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from omegaconf import DictConfig

from rlcore.config.async_training import async_training_problems, v1_problems
from rlcore.config.batch_sizes import ppo_batch_sizes, ulysses_size
from rlcore.config.cuda_graphs import capture_sizes_notes, capture_sizes_problems
from rlcore.config.expert_parallel import expert_parallel_notes, expert_parallel_problems
from rlcore.config.given_sections import given_section
from rlcore.config.keys import positive_int, positive_key
from rlcore.config.loader import ConfigError
from rlcore.config.mtp import mtp_problems
from rlcore.config.prefix_grouper import prefix_grouper_notes, prefix_grouper_problems
from rlcore.config.ranges import value_range_problems
from rlcore.config.ray_kwargs import ray_kwargs_notes, ray_kwargs_problems
from rlcore.config.rollout_skip import rollout_skip_problems
from rlcore.config.router_replay import router_replay_problems
from rlcore.config.schema import (
    ActorConfig,
    ActorRolloutRefConfig,
    AlgorithmConfig,
    AsyncTrainingConfig,
    CriticModelConfig,
    CustomRewardFunctionConfig,
    DataConfig,
    RewardModelConfig,
    RolloutConfig,
    Sections,
    TrainerConfig,
    ValKwargs,
)
from rlcore.config.sections.actor import OptimConfig
from rlcore.config.sections.skip import SkipConfig
from rlcore.errors import RLCoreError
from rlcore.modelkit.activation_offload import activation_offload_notes
from rlcore.tracking.sinks import file_logger_notes


@dataclass
class DerivedQuantities:
    """Batch arithmetic of one run, as verl computes it inside its workers."""

    world_size: int
    data_parallel_size: int
    n: int
    prompts_per_step: int
    responses_per_step: int
    mini_batch_prompts: int
    mini_batches_per_epoch: int
    responses_per_mini_batch_per_rank: int
    micro_batch_per_rank: int
    grad_accumulation_steps: int
    ppo_epochs: int
    optimizer_steps_per_step: int
    notes: list[str] = field(default_factory=list)
    sequence_parallel_size: int = 1

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (saved as ``derived.json`` in the run directory)."""
        return asdict(self)

    def summary(self) -> str:
        """Human-readable lines printed at the start of a run."""
        lines = [
            f"prompts per step: {self.prompts_per_step} x n={self.n} -> {self.responses_per_step} responses",
            f"data-parallel ranks: {self.data_parallel_size} (of {self.world_size} ranks"
            + (
                f"; world / ulysses_sequence_parallel_size {self.sequence_parallel_size}: "
                f"{self.sequence_parallel_size} ranks split each sequence)"
                if self.sequence_parallel_size > 1
                else ")"
            ),
            f"mini-batches per step: {self.mini_batches_per_epoch} x {self.ppo_epochs} epoch(s) "
            f"= {self.optimizer_steps_per_step} optimizer steps "
            f"({self.mini_batch_prompts} prompts = {self.responses_per_mini_batch_per_rank} responses per rank each)",
            f"micro-batch per rank: {self.micro_batch_per_rank} -> {self.grad_accumulation_steps} grad-accumulation steps",
        ]
        return "\n".join(lines + [f"note: {n}" for n in self.notes])


#: the values of :data:`ONLY_VALUES`' keys that mean trainer.placement=split, accepted with it: verl's
#: hybrid_engine=false (its one-step-off and fully-async trainers) is a rollout on GPUs of its own
WITH_SPLIT: dict[str, Any] = {"actor_rollout_ref.hybrid_engine": False}
#: keys accepted for verl's sake that rlcore honours only at one value: key -> (allowed values, why)
ONLY_VALUES: dict[str, tuple[tuple[Any, ...], str]] = {
    "actor_rollout_ref.hybrid_engine": (
        (True,),
        (
            "rlcore (like verl) always runs the hybrid engine; for rollout on ranks of its own set "
            "trainer.placement=split (false is accepted with it)"
        ),
    ),
    "trainer.use_legacy_worker_impl": (
        ("auto", "disable"),
        (
            "rlcore has one worker implementation, the engine-based one (verl's new workers); "
            "verl's legacy workers are not available"
        ),
    ),
}


#: verl's speed settings that cannot change results and that rlcore does not need: key -> (rlcore's value, why);
#: another value is accepted (verl scripts set them) and named in a note of the run plan
SPEED_ONLY: dict[str, tuple[Any, str]] = {
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": (False, "the entropy is computed in one piece"),
    "actor_rollout_ref.actor.entropy_from_logits_chunk_size": (2048, "the entropy is computed in one piece"),
    "actor_rollout_ref.actor.entropy_checkpointing": (False, "the entropy is not recomputed"),
    "actor_rollout_ref.ref.entropy_from_logits_with_chunking": (False, "the reference model computes no entropy"),
    "actor_rollout_ref.ref.entropy_from_logits_chunk_size": (2048, "the reference model computes no entropy"),
    "actor_rollout_ref.ref.entropy_checkpointing": (False, "the reference model computes no entropy"),
    "data.dataloader_num_workers": (0, "prompts are tokenized once, when the dataset is read"),
    "actor_rollout_ref.rollout.multi_stage_wake_up": (
        False,
        "rlcore's engines load the weights and the KV cache in their own order (an SGLang memory switch of verl)",
    ),
    "data.filter_overlong_prompts_workers": (1, "the overlong filter runs once, when the dataset is read"),
    "reward_model.model.use_remove_padding": (
        False,
        "the reward model's forward pass runs padded (packing changes its speed, not its scores)",
    ),
    "reward_model.model.use_fused_kernels": (False, "a reward model computes scores, no log-probs to fuse"),
    "reward_model.use_reward_loop": (
        True,
        "rlcore scores each batch in its reward stage (scorer processes and the reward-model worker group)",
    ),
}


#: the sections of the Megatron backend's ``megatron`` settings (rlcore-plugin-megatron declares them)
MEGATRON_SECTIONS = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")
SPEED_ONLY.update(
    {
        f"{section}.megatron.{name}": (
            False,
            "rlcore's Megatron engine converts Hugging Face weights with its own converter, not verl's mbridge",
        )
        for section in MEGATRON_SECTIONS
        for name in ("use_mbridge", "vanilla_mbridge")
    }
)


def speed_only_notes(config: DictConfig) -> list[str]:
    """One note per :data:`SPEED_ONLY` key set to another value than rlcore's: it changes nothing."""
    from omegaconf import OmegaConf

    notes = []
    for key, (value, why) in SPEED_ONLY.items():
        given = OmegaConf.select(config, key, default=value)
        if given != value:
            notes.append(f"{key}={given} changes nothing in rlcore: {why}")
    return notes


def reward_model_notes(reward_model: RewardModelConfig) -> list[str]:
    """A note when ``reward_model.rollout.name`` is set for a discriminative reward model: only
    ``reward_model.reward_manager=judge`` generates with ``reward_model.rollout``."""
    name = reward_model.rollout.name
    judge = reward_model.reward_manager == "judge"
    if reward_model.enable and not judge and name != "hf":
        return [
            f"reward_model.rollout.name={name} changes nothing in rlcore: the reward model runs on its training "
            "engine (reward_model.strategy); reward_model.rollout.* configure reward_model.reward_manager=judge"
        ]
    return []


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def sampling_problems(rollout: RolloutConfig, trainer: TrainerConfig) -> list[str]:
    """Training rollout settings that contradict the update (none with ``trainer.val_only``: nothing is
    trained). The actor computes the log-probs of the sampled tokens under ``softmax(logits / temperature)``
    (and the engines' rollout log-probs, ``calculate_log_probs``, are of the same distribution), as verl
    does: at temperature 0 that is a division by zero, and a greedy rollout (``do_sample=false``) does not
    sample the policy the update assumes (and gives a prompt's ``n`` responses the same tokens). Greedy
    decoding is for validation (``val_kwargs``)."""
    if trainer.val_only:
        return []
    key = "actor_rollout_ref.rollout"
    problems = []
    if _number(rollout.temperature) and rollout.temperature == 0:
        problems.append(
            f"{key}.temperature=0 cannot train: the actor computes the log-probs of the sampled tokens under "
            "softmax(logits / temperature), undefined at 0 (greedy decoding); train at a temperature > 0 "
            f"(verl's default is 1.0) and decode greedily in validation ({key}.val_kwargs.temperature=0)"
        )
    if rollout.do_sample is False:
        problems.append(
            f"{key}.do_sample=false cannot train: greedy training rollouts are not samples of the policy whose "
            f"log-probs the update uses (and the {key}.n responses of a prompt are identical); keep it true and "
            f"decode greedily in validation ({key}.val_kwargs.do_sample=false)"
        )
    return problems


def sampling_notes(rollout: RolloutConfig, trainer: TrainerConfig) -> list[str]:
    """Notes on sampling settings that are allowed but easy to misread: a training rollout with top-k or
    top-p filtering samples from the filtered distribution while every log-prob (the actor's and the
    engine's) is of the whole distribution at the temperature, as in verl; a greedy validation with
    ``val_kwargs.n`` > 1 decodes the same response n times."""
    key = "actor_rollout_ref.rollout"
    notes = []
    filtered = [f"{name}={getattr(rollout, name)}" for name in ("top_k", "top_p") if _filters(rollout, name)]
    if filtered and not trainer.val_only:
        notes.append(
            f"{key}.{' and '.join(filtered)}: responses are sampled from the filtered distribution, but the "
            "log-probs of the update are those of the whole distribution at the temperature (as in verl)"
        )
    val = rollout.val_kwargs
    greedy = val.do_sample is False or val.temperature == 0
    if greedy and isinstance(val.n, int) and val.n > 1:
        notes.append(
            f"{key}.val_kwargs.n={val.n} with greedy validation (val_kwargs.do_sample=false or temperature=0): "
            f"the {val.n} responses of a prompt are identical; set val_kwargs.do_sample=true and a temperature "
            "> 0 to sample them"
        )
    return notes


def _filters(section: RolloutConfig | ValKwargs, name: str) -> bool:
    """Whether ``top_k`` (> 0) or ``top_p`` (< 1) of a sampling section filters the distribution."""
    value = getattr(section, name)
    if not _number(value):
        return False
    return value > 0 if name == "top_k" else value < 1


def algorithm_value_problems(config: DictConfig) -> list[str]:
    """The names and settings the algorithm code checks when it first uses them, checked now by the same
    functions: the loss aggregation mode, the KL estimators, the KL controller and the LR schedules."""
    from omegaconf import OmegaConf

    from rlcore.config.algorithm_names import check_kl_ctrl, check_kl_penalty, scheduler_type
    from rlcore.config.ranges import OPTIM_SECTIONS

    actor, algorithm = config.actor_rollout_ref.actor, config.algorithm
    optims = {section: OptimConfig.from_mapping(OmegaConf.select(config, section)) for section in OPTIM_SECTIONS}
    checks = [
        lambda: check_kl_penalty(actor.kl_loss_type, "actor_rollout_ref.actor.kl_loss_type"),
        lambda: check_kl_penalty(algorithm.kl_penalty, "algorithm.kl_penalty"),
        lambda: check_kl_ctrl(algorithm.kl_ctrl),
        *(
            (lambda section=section, optim=optim: scheduler_type(optim.lr_scheduler_type, optim.warmup_style, section))
            for section, optim in optims.items()
        ),
    ]
    problems = []
    for check in checks:
        try:
            check()
        except RLCoreError as exc:
            problems.append(str(exc))
    return problems


def user_file_problems(reward: CustomRewardFunctionConfig, data: DataConfig) -> list[str]:
    """The reward function (``custom_reward_function``) and the dataset class (``data.custom_cls``) the config
    names are defined in their files: read, not run (:func:`rlcore.data.custom.check_defines`)."""
    from rlcore.data.custom import check_defines

    problems = []
    custom = data.custom_cls
    if custom.path and not custom.name:
        problems.append(f"data.custom_cls.path={custom.path!r} is set but data.custom_cls.name is not")
    wanted: list[tuple[str, str | None, str | None]] = [
        ("custom_reward_function", reward.path, reward.name or "compute_score")
    ]
    wanted.append(("data.custom_cls", custom.path, custom.name))
    for what, path, name in wanted:
        if not path or not name:
            continue
        try:
            check_defines(str(path), str(name), what=what, error_cls=ConfigError)
        except ConfigError as exc:
            problems += exc.problems
    return problems


def check_values(config: DictConfig) -> None:
    """Check single values that are meaningless or unsupported: zero or negative sizes and counts (a
    ``response_length`` of 0, ``total_training_steps=0``, ``total_epochs<=0``), negative timeouts, values
    outside their range (:func:`rlcore.config.ranges.value_range_problems`: a negative learning rate, a
    ``top_p`` of 0, ...), names the algorithm code would reject (:func:`algorithm_value_problems`), sampling
    settings that cannot train (:func:`sampling_problems`), a reward function or dataset class that its file
    does not define (:func:`user_file_problems`), the ``router_replay`` keys
    (:func:`rlcore.config.router_replay.router_replay_problems`), what ``actor.use_prefix_grouper`` cannot run with
    (:func:`rlcore.config.prefix_grouper.prefix_grouper_problems`), ``model.mtp``
    (:func:`rlcore.config.mtp.mtp_problems`), the rollout's expert parallelism
    (:func:`rlcore.config.expert_parallel.expert_parallel_problems`), and the verl keys rlcore honours at one value only
    (:data:`ONLY_VALUES`). Raises one :class:`ConfigError` with every problem found."""
    from omegaconf import OmegaConf

    try:
        Sections.from_tree(config)
        problems: list[str] = []
    except ConfigError as exc:
        problems = list(exc.problems)
    policy = given_section(ActorRolloutRefConfig, config)
    trainer = given_section(TrainerConfig, config)
    data = given_section(DataConfig, config)
    reward = given_section(CustomRewardFunctionConfig, config, "custom_reward_function")
    async_training = given_section(AsyncTrainingConfig, config)
    split = trainer is not None and trainer.placement == "split"
    for key, (allowed, why) in ONLY_VALUES.items():
        value = OmegaConf.select(config, key, default=None)
        if split and key in WITH_SPLIT and value is WITH_SPLIT[key]:
            continue
        if value not in allowed or type(value) not in {type(a) for a in allowed}:
            shown = " or ".join(repr(a) if isinstance(a, str) else str(a).lower() for a in allowed)
            problems.append(f"{key}={value!r} is not supported: {why} (allowed: {shown})")
    problems += value_range_problems(config)
    problems += algorithm_value_problems(config)
    if policy is not None and trainer is not None:
        problems += sampling_problems(policy.rollout, trainer)
    if reward is not None and data is not None:
        problems += user_file_problems(reward, data)
    if async_training is not None and trainer is not None and policy is not None:
        problems += async_training_problems(async_training, trainer, policy.rollout)
        if data is not None:
            problems += v1_problems(async_training, trainer, policy.rollout, data, policy.actor)
    problems += ray_kwargs_problems(config, trainer)
    skip = given_section(SkipConfig, config)
    if skip is not None:
        problems += rollout_skip_problems(skip, async_training)
        if skip.rollout.enable and trainer is not None and trainer.v1.trainer_mode != "sync":
            problems.append(
                f"skip.rollout.enable=true with trainer.v1.trainer_mode={trainer.v1.trainer_mode}: prompt groups are "
                "issued ahead of the step that trains them; verl's skip.async_rollout (by sample) is not in rlcore"
            )
    if policy is not None:  # these checks read the typed section (its own problems are reported above)
        problems += router_replay_problems(policy)
        problems += prefix_grouper_problems(policy)
        problems += mtp_problems(policy)
        problems += capture_sizes_problems(policy.rollout)
        if trainer is not None:
            problems += expert_parallel_problems(policy.rollout, trainer)
    reward_model, algorithm = given_section(RewardModelConfig, config), given_section(AlgorithmConfig, config)
    if reward_model and algorithm and reward_model.launch_reward_fn_async and algorithm.batch_filters:
        problems.append(
            "reward_model.launch_reward_fn_async=true cannot be combined with algorithm.batch_filters: "
            "the filters need the rewards before the log-probs are computed; turn one of them off"
        )
    if problems:
        raise ConfigError(*problems)


def _check_rollout_correction(algorithm: AlgorithmConfig, policy: ActorRolloutRefConfig) -> list[str]:
    """``algorithm.rollout_correction`` asks for known IS levels, RS options with valid thresholds and a loss
    type that fits the policy loss, and has the rollout log-probs it needs; ``algorithm.pf_ppo`` names a
    known method (``rlcore.algos`` imports torch, so it is imported only when a feature is asked for).
    Returns the plan's note on IS weights that bypass mode's PPO-clip loss only reports."""
    from rlcore.errors import RLCoreError

    if algorithm.use_pf_ppo:
        from rlcore.algos.pf_ppo import check_pf_ppo

        try:
            check_pf_ppo(algorithm.pf_ppo)
        except RLCoreError as exc:
            raise ConfigError(str(exc)) from exc
    correction = algorithm.rollout_correction
    level = correction.rollout_is
    rejection = correction.rollout_rs
    bypass = bool(correction.bypass_mode)
    loss_type = correction.loss_type or "ppo_clip"
    if level is None and rejection is None and not bypass and loss_type == "ppo_clip":
        return []
    from rlcore.algos.rollout_correction import IS_LEVELS, check_bypass_loss, parse_is_threshold, parse_rejection_rules

    try:
        check_bypass_loss(correction, policy.actor.policy_loss.loss_mode or "vanilla")
    except RLCoreError as exc:
        raise ConfigError(str(exc)) from exc

    if level is not None and level not in IS_LEVELS:
        raise ConfigError(
            f"algorithm.rollout_correction.rollout_is must be one of {', '.join(IS_LEVELS)} or null, got {level!r}"
        )
    asked = [name for name, on in (("rollout_is", level), ("rollout_rs", rejection), ("bypass_mode", bypass)) if on]
    if not policy.rollout.calculate_log_probs:
        raise ConfigError(
            f"algorithm.rollout_correction.{asked[0]} needs the engine's log-probs: "
            "set actor_rollout_ref.rollout.calculate_log_probs=true"
        )
    try:
        parse_is_threshold(correction.rollout_is_threshold)
    except RLCoreError as exc:
        raise ConfigError(str(exc)) from exc
    if rejection is not None:
        try:
            parse_rejection_rules(rejection, correction.rollout_rs_threshold)
        except RLCoreError as exc:
            raise ConfigError(str(exc)) from exc
    if bypass and level and loss_type == "ppo_clip":
        return [
            f"algorithm.rollout_correction.rollout_is={level} with bypass_mode and loss_type=ppo_clip: the weights "
            "are reported (rollout_corr/rollout_is_*), not applied; the PPO ratio against the rollout policy corrects"
        ]
    return []


def _data_parallel_size(config: DictConfig, world: int) -> int:
    """The actor's data-parallel size over ``world`` ranks, as its training backend derives it (``world`` when
    the backend is unknown: that is reported by the component check)."""
    from rlcore.config.batch_sizes import data_parallel_size
    from rlcore.registry import UnknownComponentError

    try:
        return data_parallel_size(config, "actor_rollout_ref.actor", world)
    except UnknownComponentError:
        return world
    except RLCoreError as exc:
        raise ConfigError(str(exc)) from exc


def derive_quantities(config: DictConfig) -> DerivedQuantities:
    """Validate cross-key constraints and return the derived batch quantities.

    verl semantics: ``ppo_mini_batch_size`` counts prompts (times ``rollout.n`` responses) and is divided
    across data-parallel ranks; ``ppo_micro_batch_size_per_gpu`` counts responses on one rank. The per-rank
    sizes come from :func:`rlcore.config.batch_sizes.ppo_batch_sizes`, the function the workers use, over
    the data-parallel size the training backend reports (world ÷ model-parallel size).
    """
    actor = ActorConfig.from_tree(config)
    data = DataConfig.from_tree(config)
    n = positive_key(config, "actor_rollout_ref.rollout.n")
    prompts = positive_int(data.train_batch_size, data.key("train_batch_size"))
    mini = positive_int(actor.ppo_mini_batch_size, actor.key("ppo_mini_batch_size"))
    epochs = positive_int(actor.ppo_epochs, actor.key("ppo_epochs"))
    world = positive_key(config, "trainer.nnodes") * positive_key(config, "trainer.n_gpus_per_node")
    notes: list[str] = []

    if config.trainer.executor == "local" and world > 1:
        raise ConfigError(
            f"trainer.executor=local runs a single process, but trainer.nnodes x trainer.n_gpus_per_node = {world} "
            f"ranks were asked for; set trainer.executor=ray (or auto)"
        )
    if config.trainer.executor not in ("local", "ray"):
        raise ConfigError(f"trainer.executor must be 'auto', 'local' or 'ray', got {config.trainer.executor!r}")
    positive_int(data.max_prompt_length, data.key("max_prompt_length"))
    positive_int(data.max_response_length, data.key("max_response_length"))
    algorithm, policy = given_section(AlgorithmConfig, config), given_section(ActorRolloutRefConfig, config)
    if algorithm is not None and policy is not None:
        notes += _check_rollout_correction(algorithm, policy)
    if mini > prompts:
        raise ConfigError(
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) must not exceed data.train_batch_size ({prompts})"
        )
    dp = _data_parallel_size(config, world)
    if (prompts * n) % dp:
        raise ConfigError(
            f"data.train_batch_size x rollout.n = {prompts * n} responses cannot be split evenly over "
            f"{dp} data-parallel ranks ({world} ranks: trainer.nnodes x trainer.n_gpus_per_node)"
        )
    try:
        sizes = ppo_batch_sizes(actor, n, dp)
    except RLCoreError as exc:
        raise ConfigError(str(exc)) from exc
    per_rank = sizes.mini
    micro = sizes.micro
    if actor.use_dynamic_bsz:
        micro = per_rank
        notes.append("use_dynamic_bsz: micro-batches are formed by ppo_max_token_len_per_gpu")
    elif sizes.micro_from_default:
        notes.append(
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is not set: using the whole "
            f"mini-batch ({per_rank} responses per rank, no gradient accumulation)"
        )
    minis = -(-prompts // mini)
    if prompts % mini:
        notes.append(
            f"data.train_batch_size ({prompts}) is not a multiple of ppo_mini_batch_size ({mini}): "
            f"the last mini-batch holds {prompts % mini} prompts"
        )
    policy, trainer = ActorRolloutRefConfig.from_tree(config), TrainerConfig.from_tree(config)
    notes += speed_only_notes(config)
    notes += sampling_notes(policy.rollout, trainer)
    notes += reward_model_notes(RewardModelConfig.from_tree(config))
    notes += activation_offload_notes(trainer.device, (policy.model, CriticModelConfig.from_tree(config)))
    notes += expert_parallel_notes(policy.rollout, trainer)
    notes += capture_sizes_notes(policy.rollout, trainer)
    notes += ray_kwargs_notes(config, trainer)
    notes += file_logger_notes(config)
    notes += prefix_grouper_notes(policy)
    return DerivedQuantities(
        world_size=world,
        data_parallel_size=dp,
        n=n,
        prompts_per_step=prompts,
        responses_per_step=prompts * n,
        mini_batch_prompts=mini,
        mini_batches_per_epoch=minis,
        responses_per_mini_batch_per_rank=per_rank,
        micro_batch_per_rank=micro,
        grad_accumulation_steps=per_rank // micro,
        ppo_epochs=epochs,
        optimizer_steps_per_step=minis * epochs,
        notes=notes,
        sequence_parallel_size=ulysses_size(config, "actor_rollout_ref.actor"),
    )
