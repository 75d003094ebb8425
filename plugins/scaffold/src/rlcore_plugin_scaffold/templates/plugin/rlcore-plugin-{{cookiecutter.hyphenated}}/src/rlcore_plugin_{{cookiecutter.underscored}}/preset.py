"""The preset ``{{ cookiecutter.hyphenated }}`` (``rlcore run --preset {{ cookiecutter.hyphenated }}``).

What it does: a named config fragment applied after rlcore's defaults and before the user's files and
``key=value`` overrides (so the user always wins). This one samples groups of 8 responses per prompt,
names the experiment after the plugin{% if cookiecutter.advantage_estimator or cookiecutter.policy_loss or cookiecutter.reward_manager or cookiecutter.rollout_engine or cookiecutter.training_backend or cookiecutter.dataset or cookiecutter.batch_filter or cookiecutter.tracker %} and selects this plugin's components{% endif %}.

What to change: the entries of :data:`PRESET`, dotted config keys to values. Name only keys that exist (in
rlcore's defaults or a plugin's ``config_defaults``): an unknown key is an error when the preset is
applied. ``tests/test_preset.py`` runs rlcore's contract suite on it.
"""

from __future__ import annotations

from typing import Any

PRESET: dict[str, Any] = {
    "actor_rollout_ref.rollout.n": 8,
    "trainer.experiment_name": "{{ cookiecutter.hyphenated }}",
{% if cookiecutter.advantage_estimator %}
    "algorithm.adv_estimator": "{{ cookiecutter.hyphenated }}",
{% endif %}
{% if cookiecutter.policy_loss %}
    "actor_rollout_ref.actor.policy_loss.loss_mode": "{{ cookiecutter.hyphenated }}",
{% endif %}
{% if cookiecutter.reward_manager %}
    "reward_model.reward_manager": "{{ cookiecutter.hyphenated }}",
{% endif %}
{% if cookiecutter.rollout_engine %}
    "actor_rollout_ref.rollout.name": "{{ cookiecutter.hyphenated }}",
{% endif %}
{% if cookiecutter.training_backend %}
    "actor_rollout_ref.actor.strategy": "{{ cookiecutter.hyphenated }}",
{% endif %}
{% if cookiecutter.dataset %}
    "data.dataset": "{{ cookiecutter.hyphenated }}",
{% endif %}
{% if cookiecutter.batch_filter %}
    "algorithm.batch_filters": ["{{ cookiecutter.hyphenated }}"],
{% endif %}
{% if cookiecutter.tracker %}
    "trainer.logger": ["console", "{{ cookiecutter.hyphenated }}"],
{% endif %}
}
