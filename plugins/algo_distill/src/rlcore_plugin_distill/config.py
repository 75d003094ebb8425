"""verl 0.10's ``distillation`` section (``verl/trainer/config/distillation/distillation.yaml``) as typed
sections with its defaults (torch-free: the hooks module returns it from ``config_defaults``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlcore.api import Section

#: the single-teacher entry of verl's defaults; with other entries present it must be left unset
DEFAULT_TEACHER = "teacher_model"


@dataclass(frozen=True)
class TeacherInferenceConfig:
    """``distillation.teacher_models.<name>.inference``: verl's serving settings of one teacher."""

    #: verl's serving engine; here the training backend's forward scores (plan note)
    name: str = "vllm"
    #: a replica's size in verl's pool check (tp × dp)
    tensor_model_parallel_size: int = 2
    #: a replica's size in verl's pool check (tp × dp)
    data_parallel_size: int = 1
    #: vLLM's expert parallelism over a replica's tp × dp ranks: 1 or tp × dp (verl's rule, checked); unused here
    #: (plan note)
    expert_parallel_size: int = 1
    #: verl's serving-engine memory share; unused here (plan note)
    gpu_memory_utilization: float = 0.5
    #: must hold data.max_prompt_length + data.max_response_length + 1
    max_model_len: int | None = None


@dataclass(frozen=True)
class TeacherConfig:
    """``distillation.teacher_models.<name>``: one teacher entry, with verl's defaults (a plain dataclass: its
    ``key`` field would shadow :meth:`Section.key`; the entries live in the free-form ``teacher_models``)."""

    #: the value of the sample's teacher_key routed to this teacher (several teachers)
    key: str | None = None
    #: the teacher's Hugging Face directory (required); same tokenizer as the student
    model_path: str | None = None
    #: verl's teacher replicas (0: the whole pool, for one teacher); checked, see README
    num_replicas: int = 0
    #: verl's serving settings
    inference: TeacherInferenceConfig = field(default_factory=TeacherInferenceConfig)


@dataclass(frozen=True)
class DistillationLossConfig(Section):
    """``distillation.distillation_loss``: the distillation loss and how it joins the policy loss."""

    #: per-token reverse-KL estimator kl|k1|abs|mse|k2|low_var_kl|k3, or forward_kl_topk
    loss_mode: str = "k3"
    #: forward_kl_topk: how many of the teacher's most likely tokens per position
    topk: int = 32
    #: also the policy loss on the task reward's advantages
    use_task_rewards: bool = True
    #: weight of the distillation loss when use_task_rewards
    distillation_loss_coef: float = 1.0
    #: clamp each token's distillation loss to ±this
    loss_max_clamp: float | None = None
    #: forward_kl_topk: clamp both top-k log-probs below (no-op for estimators)
    log_prob_min_clamp: float | None = None
    #: true: PPO-clipped surrogate with advantage −loss; false: backprop the loss
    use_policy_gradient: bool = False
    #: the surrogate of use_policy_gradient (verl: vanilla only)
    policy_loss_mode: str = "vanilla"
    #: that surrogate's clip range (fallback of _low/_high)
    clip_ratio: float = 0.2
    #: the surrogate's lower clip range
    clip_ratio_low: float = 0.2
    #: the surrogate's upper clip range
    clip_ratio_high: float = 0.2


def _default_teachers() -> dict[str, Any]:
    """verl's single default teacher entry, as plain data."""
    return {DEFAULT_TEACHER: asdict(TeacherConfig())}


@dataclass(frozen=True)
class DistillationConfig(Section):
    """``distillation``: on-policy distillation from one or more teachers (rlcore-plugin-distill)."""

    PATH = "distillation"
    #: on-policy distillation: teacher log-probs on the student's samples (rlcore-plugin-distill)
    enabled: bool = False
    #: verl's teacher pool per node; checked against the teachers' replicas
    n_gpus_per_node: int = 8
    #: verl's teacher pool nodes (0: none); when ≥ 1 checked against the teachers' replicas
    nnodes: int = 0
    #: the sample field that routes it to a teacher's key (several teachers)
    teacher_key: str = "data_source"
    #: the teachers by entry name (any name), each with the keys of a :class:`TeacherConfig`
    teacher_models: dict[str, TeacherConfig] = field(default_factory=_default_teachers)
    #: the distillation loss
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
