"""rlcore hooks of the on-policy distillation plugin. Imports no torch: the worker and the loss are lazy."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlcore import hookimpl
from rlcore.api import ConfigError, StepExtension
from rlcore_plugin_distill.config import DistillationConfig
from rlcore_plugin_distill.settings import D, distillation_settings, enabled, serving_notes

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"
#: the reward manager of a run without a verifier
TEACHER_ONLY = "teacher_only"
#: the step extension of a distillation run: the teacher group, its stage and the actor loss term
EXTENSION = StepExtension(
    "teacher",
    worker="rlcore_plugin_distill.worker:TeacherWorker",
    method="compute_teacher_log_prob",
    loss_term="rlcore_plugin_distill.loss:make_distillation_term",
)


@hookimpl
def config_defaults() -> DistillationConfig:
    """verl 0.10's ``distillation.*`` section, with its defaults
    (:class:`~rlcore_plugin_distill.config.DistillationConfig`)."""
    return DistillationConfig()


@hookimpl
def on_config_resolved(config: DictConfig) -> None:
    """Validate the ``distillation`` section of an enabled run (every problem at once, each naming its key),
    and refuse the ``teacher_only`` reward manager without distillation."""
    manager = OmegaConf.select(config, "reward_model.reward_manager")
    if manager == TEACHER_ONLY and not enabled(config):
        raise ConfigError(
            f"reward_model.reward_manager={TEACHER_ONLY} scores every response 0: it is for on-policy distillation "
            f"without a verifier; set {D}.enabled=true and the teacher, or choose another reward manager"
        )
    if enabled(config):
        distillation_settings(config)


@hookimpl
def plan_lines(config: DictConfig) -> list[str] | None:
    """A distillation run's note on each teacher's serving settings (:func:`serving_notes`)."""
    return serving_notes(config) or None if enabled(config) else None


@hookimpl
def step_extensions(config: DictConfig) -> list[StepExtension] | None:
    """The teacher worker group, its stage (``teacher_log_probs``) and the distillation loss term, when
    ``distillation.enabled``."""
    return [EXTENSION] if enabled(config) else None


@hookimpl
def register_reward_managers(register: Any) -> None:
    """Register ``teacher_only``: no verifier (every response scores 0), for distillation alone."""
    register(
        TEACHER_ONLY,
        "rlcore_plugin_distill.no_verifier:TeacherOnlyRewardManager",
        description="no verifier: every response scores 0 (on-policy distillation with the teacher as the only signal)",
    )
