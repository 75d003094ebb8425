"""verl 0.10's ``distillation.*`` section: its defaults, and its validation into :class:`DistillationSettings`.

Imports no torch: the hooks module reads it at start-up, and ``rlcore run --dry-run`` validates with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore.api import ConfigError
from rlcore_plugin_distill.config import DEFAULT_TEACHER, DistillationConfig, TeacherConfig

D = "distillation"
#: the per-token reverse-KL estimators of ``distillation_loss.loss_mode`` (rlcore.algos.kl_penalty's names)
ESTIMATORS: tuple[str, ...] = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
#: verl's top-k mode: forward KL over the teacher's ``topk`` most likely tokens at each response position,
#: with the student's log-probs there from the training forward (``rlcore.api.training.GATHER_IDS``)
TOPK_MODES: tuple[str, ...] = ("forward_kl_topk",)

#: the keys of one teacher entry, with verl's defaults (``distillation.teacher_models.<name>.*``)
TEACHER_DEFAULTS: dict[str, Any] = asdict(TeacherConfig())
#: a teacher's ``inference`` keys that only verl's serving engine reads (the plan notes them)
SERVING_ONLY = ("name", "expert_parallel_size", "gpu_memory_utilization")


@dataclass(frozen=True)
class Teacher:
    """One teacher: its entry name, its routing key (None for a single teacher) and its model directory."""

    name: str
    key: str | None
    model_path: str


@dataclass(frozen=True)
class LossSettings:
    """``distillation.distillation_loss``, validated."""

    loss_mode: str
    use_task_rewards: bool
    coef: float
    loss_max_clamp: float | None
    use_policy_gradient: bool
    clip_ratio: float
    clip_ratio_low: float
    clip_ratio_high: float
    topk: int = 0
    log_prob_min_clamp: float | None = None

    @property
    def uses_topk(self) -> bool:
        """Whether the loss reads the teacher's top-k (``forward_kl_topk``) rather than a per-token estimate."""
        return self.loss_mode in TOPK_MODES


@dataclass(frozen=True)
class DistillationSettings:
    """The validated ``distillation`` section of an enabled run."""

    teachers: tuple[Teacher, ...]
    teacher_key: str
    loss: LossSettings


def enabled(config: DictConfig) -> bool:
    """Whether ``distillation.enabled`` is set (False when the section is absent)."""
    return bool(OmegaConf.select(config, f"{D}.enabled", default=DistillationConfig.enabled))


def _teacher_entries(config: DictConfig, problems: list[str]) -> dict[str, dict[str, Any]]:
    """The configured teacher entries (verl's rule: the default ``teacher_model`` entry is dropped when other
    entries are given, and it is an error here to have configured it as well)."""
    section = OmegaConf.select(config, f"{D}.teacher_models") or {}
    entries: dict[str, Any] = {
        str(name): OmegaConf.to_container(entry, resolve=True) for name, entry in section.items()
    }
    if len(entries) > 1 and DEFAULT_TEACHER in entries:
        default = entries.pop(DEFAULT_TEACHER)
        if isinstance(default, dict) and default.get("model_path"):
            problems.append(
                f"{D}.teacher_models.{DEFAULT_TEACHER}.model_path is set beside other teachers "
                f"({', '.join(sorted(entries))}): verl drops the {DEFAULT_TEACHER!r} entry then; rename it "
                f"(e.g. +{D}.teacher_models.teacher_model1.model_path=...)"
            )
    return {name: dict(entry) if isinstance(entry, dict) else {} for name, entry in entries.items()}


def _unknown_keys(prefix: str, given: dict[str, Any], known: dict[str, Any], problems: list[str]) -> None:
    """Name every key of ``given`` that ``known`` does not declare (recursively)."""
    for key, value in given.items():
        if key not in known:
            problems.append(
                f"unknown config key '{prefix}.{key}': a teacher entry takes "
                f"{', '.join(sorted(TEACHER_DEFAULTS))} and inference.{{{', '.join(TEACHER_DEFAULTS['inference'])}}}"
            )
        elif isinstance(known[key], dict) and isinstance(value, dict):
            _unknown_keys(f"{prefix}.{key}", value, known[key], problems)


def _positive_int(value: Any, key: str, problems: list[str], minimum: int = 1) -> int:
    """``value`` as an int of at least ``minimum``, or 0 with a problem recorded."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.append(f"{key}={value!r} must be an integer of at least {minimum}")
        return 0
    return value


def _check_pool(config: DictConfig, entries: dict[str, dict[str, Any]], problems: list[str]) -> None:
    """verl's sizing rule, when a teacher pool is given (``nnodes`` ≥ 1): the teachers' replicas
    (num_replicas × tp × dp each) fill ``n_gpus_per_node × nnodes`` exactly; one teacher with
    ``num_replicas=0`` takes the whole pool. ``nnodes=0`` (verl's default) gives no pool to check."""
    nnodes = OmegaConf.select(config, f"{D}.nnodes")
    if nnodes == 0:
        return
    pool = _positive_int(OmegaConf.select(config, f"{D}.n_gpus_per_node"), f"{D}.n_gpus_per_node", problems) * (
        _positive_int(nnodes, f"{D}.nnodes", problems, minimum=0)
    )
    total = 0
    for name, entry in entries.items():
        inference = {**TEACHER_DEFAULTS["inference"], **(entry.get("inference") or {})}
        prefix = f"{D}.teacher_models.{name}"
        replica = _positive_int(
            inference["tensor_model_parallel_size"], f"{prefix}.inference.tensor_model_parallel_size", problems
        ) * _positive_int(inference["data_parallel_size"], f"{prefix}.inference.data_parallel_size", problems)
        replicas = entry.get("num_replicas", 0)
        if len(entries) == 1 and not replicas and replica and pool:
            if pool % replica:
                problems.append(
                    f"{prefix}: a replica's size (tensor × data parallel = {replica}) must divide the teacher "
                    f"pool ({D}.n_gpus_per_node × {D}.nnodes = {pool})"
                )
                continue
            replicas = pool // replica
        total += _positive_int(replicas, f"{prefix}.num_replicas", problems) * replica
    if pool and total and total != pool:
        problems.append(
            f"the teachers' replicas need {total} devices (num_replicas × tensor × data parallel, summed) but the "
            f"teacher pool {D}.n_gpus_per_node × {D}.nnodes is {pool}: make them equal (verl's rule)"
        )


def _check_expert_parallel(entries: dict[str, dict[str, Any]], problems: list[str]) -> None:
    """A teacher's ``inference.expert_parallel_size`` is 1 or its replica's tensor × data parallel size: verl's rule
    (vLLM spreads the experts over every rank of a replica)."""
    for name, entry in entries.items():
        inference = {**TEACHER_DEFAULTS["inference"], **(entry.get("inference") or {})}
        prefix = f"{D}.teacher_models.{name}.inference"
        experts = _positive_int(inference["expert_parallel_size"], f"{prefix}.expert_parallel_size", problems)
        replica = inference["tensor_model_parallel_size"], inference["data_parallel_size"]
        if experts > 1 and all(isinstance(size, int) for size in replica) and experts != replica[0] * replica[1]:
            problems.append(
                f"{prefix}.expert_parallel_size={experts} must be 1 or tensor_model_parallel_size × "
                f"data_parallel_size = {replica[0] * replica[1]} (verl's rule: vLLM spreads the experts over a "
                "replica's ranks)"
            )


def serving_notes(config: DictConfig) -> list[str]:
    """The plan note of each teacher's serving settings (``inference.*`` other than the pool sizes and
    ``max_model_len``): verl's vLLM server runs with them; here the training backend's forward scores the teacher."""
    notes = []
    for name, entry in _teacher_entries(config, []).items():
        inference = {**TEACHER_DEFAULTS["inference"], **(entry.get("inference") or {})}
        given = ", ".join(f"{key}={inference[key]}" for key in SERVING_ONLY)
        notes.append(
            f"{D}.teacher_models.{name}.inference: {given} change nothing here: verl serves the teacher with them, "
            "rlcore-plugin-distill scores it with the training backend's forward"
        )
    return notes


def _check_lengths(config: DictConfig, entries: dict[str, dict[str, Any]], problems: list[str]) -> None:
    """A teacher's ``inference.max_model_len`` must hold the student's prompt, response and one token."""
    need = int(OmegaConf.select(config, "data.max_prompt_length") or 0) + int(
        OmegaConf.select(config, "data.max_response_length") or 0
    )
    for name, entry in entries.items():
        limit = (entry.get("inference") or {}).get("max_model_len")
        if limit is not None and need + 1 > int(limit):
            problems.append(
                f"{D}.teacher_models.{name}.inference.max_model_len={limit} cannot hold the student's prompt and "
                f"response (data.max_prompt_length + data.max_response_length + 1 = {need + 1})"
            )


def _loss_settings(config: DictConfig, problems: list[str]) -> LossSettings:
    """``distillation.distillation_loss``, validated as verl validates it."""
    section = OmegaConf.to_container(OmegaConf.select(config, f"{D}.distillation_loss"), resolve=True)
    assert isinstance(section, dict)
    prefix = f"{D}.distillation_loss"
    mode = str(section["loss_mode"])
    use_pg = bool(section["use_policy_gradient"])
    if mode in TOPK_MODES:
        _check_topk_forward(config, problems)
    elif mode not in ESTIMATORS:
        problems.append(f"{prefix}.loss_mode={mode!r} is unknown; use one of {', '.join((*ESTIMATORS, *TOPK_MODES))}")
    elif mode in ("kl", "k1") and not use_pg:
        problems.append(
            f"{prefix}.loss_mode={mode} with use_policy_gradient=false: the gradient of k1 does not depend on the "
            "teacher (verl refuses it too); set use_policy_gradient=true or use k3"
        )
    if section["policy_loss_mode"] != "vanilla":
        problems.append(
            f"{prefix}.policy_loss_mode={section['policy_loss_mode']!r}: only vanilla is supported (as in verl)"
        )
    topk = _positive_int(section["topk"], f"{prefix}.topk", problems)
    floor = section["log_prob_min_clamp"]
    if floor is not None and float(floor) >= 0:
        problems.append(f"{prefix}.log_prob_min_clamp={floor} must be negative (a log-prob floor) or null")
    clamp = section["loss_max_clamp"]
    if clamp is not None and float(clamp) <= 0:
        problems.append(f"{prefix}.loss_max_clamp={clamp} must be positive (or null)")
    clip = float(section["clip_ratio"])
    return LossSettings(
        loss_mode=mode,
        use_task_rewards=bool(section["use_task_rewards"]),
        coef=float(section["distillation_loss_coef"]),
        loss_max_clamp=None if clamp is None else float(clamp),
        use_policy_gradient=use_pg,
        clip_ratio=clip,
        clip_ratio_low=float(section["clip_ratio_low"] if section["clip_ratio_low"] is not None else clip),
        clip_ratio_high=float(section["clip_ratio_high"] if section["clip_ratio_high"] is not None else clip),
        topk=topk,
        log_prob_min_clamp=None if floor is None else float(floor),
    )


def _check_topk_forward(config: DictConfig, problems: list[str]) -> None:
    """``forward_kl_topk`` reads the student's log-probs at the teacher's top-k ids from each position's whole
    logits: not with the settings whose forward never holds them (Ulysses slices, fused kernels of the
    engines that have them), nor with the shared-prompt forward (``actor.use_prefix_grouper``)."""
    mode = f"{D}.distillation_loss.loss_mode=forward_kl_topk"
    sliced = (
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    )
    blocked = [key for key in sliced if int(OmegaConf.select(config, key) or 1) > 1]
    # the Megatron engine reads its output layer's logits whatever use_fused_kernels says
    megatron = OmegaConf.select(config, "actor_rollout_ref.actor.strategy") == "megatron"
    if OmegaConf.select(config, "actor_rollout_ref.model.use_fused_kernels") and not megatron:
        blocked.append("actor_rollout_ref.model.use_fused_kernels")
    for key in blocked:
        problems.append(
            f"{key}={OmegaConf.select(config, key)} cannot run with {mode}: the student's log-probs at the "
            "teacher's top-k ids need each position's whole logits, which that forward never holds"
        )
    grouper = "actor_rollout_ref.actor.use_prefix_grouper"
    if OmegaConf.select(config, grouper):  # a core key: always declared
        problems.append(
            f"{grouper}=true cannot run with {mode}: the shared-prompt forward returns the sampled tokens' "
            "log-probs only, not those at the teacher's top-k ids"
        )


def distillation_settings(config: DictConfig) -> DistillationSettings:
    """The validated ``distillation`` section; a :class:`ConfigError` lists every problem, each naming its key."""
    problems: list[str] = []
    entries = _teacher_entries(config, problems)
    teachers: list[Teacher] = []
    keys: set[str] = set()
    for name, entry in entries.items():
        prefix = f"{D}.teacher_models.{name}"
        _unknown_keys(prefix, entry, TEACHER_DEFAULTS, problems)
        if not entry.get("model_path"):
            problems.append(f"{prefix}.model_path is not set: give the teacher's Hugging Face model directory")
        key = entry.get("key")
        if len(entries) > 1:
            if not key:
                problems.append(
                    f"{prefix}.key is not set: with several teachers each routes the samples whose "
                    f"{D}.teacher_key field equals its key"
                )
            elif key in keys:
                problems.append(f"{prefix}.key={key!r} is the key of another teacher too")
            keys.add(str(key))
        teachers.append(Teacher(name, str(key) if len(entries) > 1 and key else None, str(entry.get("model_path"))))
    if not entries:
        problems.append(f"{D}.enabled=true but {D}.teacher_models is empty")
    _check_pool(config, entries, problems)
    _check_expert_parallel(entries, problems)
    _check_lengths(config, entries, problems)
    loss = _loss_settings(config, problems)
    if problems:
        raise ConfigError(*problems)
    return DistillationSettings(tuple(teachers), str(OmegaConf.select(config, f"{D}.teacher_key")), loss)
