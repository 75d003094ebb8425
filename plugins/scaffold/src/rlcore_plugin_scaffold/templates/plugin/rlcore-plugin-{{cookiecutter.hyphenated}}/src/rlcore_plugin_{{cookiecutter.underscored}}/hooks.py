{% set name = cookiecutter.hyphenated %}
{% set package = 'rlcore_plugin_' ~ cookiecutter.underscored %}
"""The plugin's hooks: registers each component under the name ``{{ name }}`` as a lazy ``"module:attr"`` target.

rlcore imports this module to list plugins and to build the registry in every process, so it must stay
light: no torch, transformers or other heavy import here (``tests/test_plugin.py`` checks it). The
components' modules are imported the first time a run uses them.
"""

from __future__ import annotations

from collections.abc import Callable

from rlcore import hookimpl
{% if cookiecutter.advantage_estimator %}
from rlcore.api import AdvantageEstimatorSpec
{% endif %}

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = "{{ cookiecutter.rlcore_api }}"
{% if cookiecutter.advantage_estimator %}


@hookimpl
def register_advantage_estimators(register: Callable[..., None]) -> None:
    """``algorithm.adv_estimator={{ name }}``: a group-mean baseline; it needs groups of at least two responses."""
    register(
        "{{ name }}",
        "{{ package }}.advantage_estimator:compute_advantage",
        description="reward minus the mean reward of its group (no critic)",
        spec=AdvantageEstimatorSpec(min_group_size=2),
    )
{% endif %}
{% if cookiecutter.policy_loss %}


@hookimpl
def register_policy_losses(register: Callable[..., None]) -> None:
    """``actor_rollout_ref.actor.policy_loss.loss_mode={{ name }}``."""
    register("{{ name }}", "{{ package }}.policy_loss:compute_policy_loss", description="symmetric clipped surrogate")
{% endif %}
{% if cookiecutter.reward_manager %}


@hookimpl
def register_reward_managers(register: Callable[..., None]) -> None:
    """``reward_model.reward_manager={{ name }}``."""
    register("{{ name }}", "{{ package }}.reward_manager:RewardManager", description="one scorer call per sample")
{% endif %}
{% if cookiecutter.reward_scorer %}


@hookimpl
def register_reward_scorers(register: Callable[..., None]) -> None:
    """The scorer of samples whose ``data_source`` is ``{{ name }}``."""
    register("{{ name }}", "{{ package }}.reward_scorer:compute_score", description="last number equals the ground truth")
{% endif %}
{% if cookiecutter.rollout_engine %}


@hookimpl
def register_rollout_engines(register: Callable[..., None]) -> None:
    """``actor_rollout_ref.rollout.name={{ name }}``."""
    register("{{ name }}", "{{ package }}.rollout_engine:RolloutEngine", description="wraps the built-in hf engine")
{% endif %}
{% if cookiecutter.training_backend %}


@hookimpl
def register_training_backends(register: Callable[..., None]) -> None:
    """``actor_rollout_ref.actor.strategy={{ name }}``."""
    register("{{ name }}", "{{ package }}.training_backend:Backend", description="delegates to the fsdp backend")
{% endif %}
{% if cookiecutter.dataset %}


@hookimpl
def register_datasets(register: Callable[..., None]) -> None:
    """``data.dataset={{ name }}``: JSON lines of ``{"question": ..., "answer": ...}``."""
    register("{{ name }}", "{{ package }}.dataset:QuestionAnswerDataset", description="question/answer JSON lines")
{% endif %}
{% if cookiecutter.batch_filter %}


@hookimpl
def register_batch_filters(register: Callable[..., None]) -> None:
    """``algorithm.batch_filters=[{{ name }}]``."""
    register("{{ name }}", "{{ package }}.batch_filter:keep_varied_groups", description="drops groups with equal rewards")
{% endif %}
{% if cookiecutter.tracker %}


@hookimpl
def register_trackers(register: Callable[..., None]) -> None:
    """``trainer.logger=[console,{{ name }}]``."""
    register("{{ name }}", "{{ package }}.tracker:Tracker", description="JSON lines in the run directory")
{% endif %}
{% if cookiecutter.preset %}


@hookimpl
def register_presets(register: Callable[..., None]) -> None:
    """``rlcore run --preset {{ name }}``."""
    register("{{ name }}", "{{ package }}.preset:PRESET", description="settings for this plugin's components")
{% endif %}
{% if cookiecutter.tool %}


@hookimpl
def register_tools(register: Callable[..., None]) -> None:
    """``class_name: {{ name }}`` in the tool YAML (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)."""
    register("{{ name }}", "{{ package }}.tool:WordCountTool", description="counts the words of a text")
{% endif %}
{% if cookiecutter.agent_loop %}


@hookimpl
def register_agent_loops(register: Callable[..., None]) -> None:
    """``actor_rollout_ref.rollout.agent.default_agent_loop={{ name }}`` (or a sample's ``agent_name``)."""
    register("{{ name }}", "{{ package }}.agent_loop:CheckAgainLoop", description="answer, check, answer again")
{% endif %}
{% if cookiecutter.interaction %}


@hookimpl
def register_interactions(register: Callable[..., None]) -> None:
    """``class_name: {{ name }}`` in the interaction YAML (``multi_turn.interaction_config_path``)."""
    register("{{ name }}", "{{ package }}.interaction:ExpectsAnswer", description="a user expecting one answer")
{% endif %}
{% if cookiecutter.tool_parser %}


@hookimpl
def register_tool_parsers(register: Callable[..., None]) -> None:
    """``actor_rollout_ref.rollout.multi_turn.format={{ name }}``."""
    register("{{ name }}", "{{ package }}.tool_parser:TagParser", description='<call name="...">{json}</call>')
{% endif %}
{% if cookiecutter.weight_transport %}


@hookimpl
def register_weight_transports(register: Callable[..., None]) -> None:
    """``actor_rollout_ref.rollout.checkpoint_engine.backend={{ name }}``."""
    register(
        "{{ name }}",
        "{{ package }}.weight_transport:TensorByTensor",
        description="one bucket per tensor",
    )
{% endif %}
