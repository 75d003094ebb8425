"""verl's serving keys rlcore honours at one value or with its own effect (docs/from-verl.md): the rollout's
``skip_tokenizer_init``, ``full_determinism`` and a distillation teacher's ``inference.expert_parallel_size`` (1 or
the replica's tensor x data parallel size, verl's rule: ``plugins/algo_distill/tests/test_distill.py``); a teacher's
other serving-engine settings stay a named missing feature."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides

TEACHER = "distillation.teacher_models.teacher_model.inference"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> list[str]:
    """The tiny run's overrides."""
    tmp = tmp_path_factory.mktemp("serving")
    return tiny_overrides(tmp, tiny_model_dir, make_tiny_task(tmp / "task"))


@pytest.mark.parametrize(
    "arg",
    [
        "actor_rollout_ref.rollout.skip_tokenizer_init=true",
        "actor_rollout_ref.rollout.full_determinism=true",
        f"{TEACHER}.expert_parallel_size=1",
    ],
    ids=["skip_tokenizer_init", "full_determinism", "teacher_ep"],
)
def test_accepted(base: list[str], arg: str) -> None:
    """Each is accepted by the dry run."""
    result = dry_run(*base, arg)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (
            "actor_rollout_ref.rollout.skip_tokenizer_init=false",
            "skip_tokenizer_init: starting the serving engine's tokenizer (rollout.skip_tokenizer_init=false): "
            "rlcore's engines take and return token ids",
        ),
        (f"+{TEACHER}.enforce_eager=true", "a serving engine for distillation teachers"),
        (
            "reward_model.rollout.full_determinism=true",
            "batch-invariant deterministic inference for the reward model's generation",
        ),
    ],
    ids=["skip_tokenizer_init", "teacher_serving", "reward_model_determinism"],
)
def test_refused_naming_the_feature(base: list[str], arg: str, message: str) -> None:
    """The values rlcore cannot honour are one error line naming the feature."""
    result = dry_run(*base, arg)
    assert result.exit_code != 0
    assert message in result.output
