"""The suggestions for the natural mistakes: other trainers' key names, an option written as a key, names in
another case, and an algorithm named as the wrong kind — never another algorithm when the name exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlcore.config import ConfigError, load_config
from rlcore.config.loader import default_config, known_keys
from rlcore.config.suggest import SYNONYMS
from rlcore.plugins import load_plugins
from rlcore.registry import UnknownComponentError


def problems(*overrides: str, presets: tuple[str, ...] = ()) -> list[str]:
    """The problems ``load_config`` reports for ``overrides`` and ``presets``."""
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides, presets=presets)
    return info.value.problems


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("actor_rollout_ref.actor.optim.learning_rate", "actor_rollout_ref.actor.optim.lr"),
        ("optim.learning_rate", "actor_rollout_ref.actor.optim.lr"),
        ("critic.optim.learning_rate", "critic.optim.lr"),
        ("trainer.epochs", "trainer.total_epochs"),
        ("epochs", "trainer.total_epochs"),
        ("trainer.max_steps", "trainer.total_training_steps"),
        ("actor_rollout_ref.rollout.num_generations", "actor_rollout_ref.rollout.n"),
        ("actor_rollout_ref.actor.max_grad_norm", "actor_rollout_ref.actor.grad_clip"),
    ],
)
def test_another_trainers_key_name_suggests_verls(key: str, meant: str) -> None:
    (problem,) = problems(f"{key}=1")
    word = key.rpartition(".")[2]
    assert f"unknown config key {key!r}. Did you mean {meant!r}? (verl's name for {word})" in problem


def test_every_synonym_names_a_declared_key() -> None:
    """The table cannot point at a key that does not exist (or was renamed)."""
    last_parts = {key.rpartition(".")[2] for key in known_keys(default_config()).leaves}
    assert {name for names in SYNONYMS.values() for name in names} <= last_parts


def test_a_preset_written_as_a_key_gets_the_option(tmp_path: Path) -> None:
    (problem,) = problems("preset=dapo")
    assert (
        problem
        == "command line: unknown config key 'preset': a preset is not a config key: choose it with --preset dapo"
    )
    path = tmp_path / "run.yaml"
    path.write_text("preset: dapo\n")
    with pytest.raises(ConfigError, match="run.yaml': unknown config key 'preset': .* --preset dapo"):
        load_config(files=[str(path)])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algorithm.adv_estimator=GRPO", "unknown advantage_estimator 'GRPO'. Did you mean 'grpo'?"),
        (
            "actor_rollout_ref.actor.policy_loss.loss_mode=VANILLA",
            "unknown policy_loss 'VANILLA'. Did you mean 'vanilla'?",
        ),
        ("actor_rollout_ref.actor.strategy=FSDP", "unknown training_backend 'FSDP'. Did you mean 'fsdp'?"),
        ("actor_rollout_ref.rollout.name=HF", "unknown rollout_engine 'HF'. Did you mean 'hf'?"),
        (
            "algorithm.adv_estimator=dapo",
            "unknown advantage_estimator 'dapo': 'dapo' is a preset, not an advantage_estimator; choose it with "
            "rlcore run --preset dapo",
        ),
    ],
)
def test_names_in_another_case_or_of_another_kind(override: str, message: str) -> None:
    from rlcore.run import check_components

    config = load_config(overrides=["data.train_files=x.parquet", "actor_rollout_ref.model.path=m", override])
    with pytest.raises(ConfigError) as info:
        check_components(config, load_plugins())
    assert any(message in problem for problem in info.value.problems), info.value.problems


def test_preset_names_in_another_case() -> None:
    registry = load_plugins().registry
    with pytest.raises(UnknownComponentError, match=r"unknown preset 'DAPO'\. Did you mean 'dapo'\?"):
        registry.get("preset", "DAPO")
    assert "Known policy_losses:" in str(pytest.raises(UnknownComponentError, registry.get, "policy_loss", "x").value)


def test_an_algorithm_named_as_a_preset_is_never_another_algorithm() -> None:
    """``--preset grpo``: there is no grpo preset, and the bundled task trains GRPO already; ``drgrpo`` (the
    closest preset by spelling) is another algorithm and is not suggested."""
    (problem,) = problems(presets=("arith-cpu", "grpo"))
    assert problem == (
        "unknown preset 'grpo': 'grpo' is an advantage_estimator, and the one this run uses already "
        "(algorithm.adv_estimator=grpo, preset 'arith-cpu'): drop --preset grpo"
    )
    (upper,) = problems(presets=("arith-cpu", "GRPO"))
    assert "drop --preset GRPO" in upper
    (rloo,) = problems(presets=("rloo",))
    assert rloo.startswith(
        "unknown preset 'rloo': 'rloo' is an advantage_estimator, not a preset; choose it with "
        "algorithm.adv_estimator=rloo. Known presets: "
    )
    for message in (problem, upper, rloo):
        assert "drgrpo" not in message.split("Known presets:")[0]
