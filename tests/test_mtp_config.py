"""``actor_rollout_ref.model.mtp`` (verl's multi-token prediction keys) in the dry run: accepted where the Megatron
backend trains the MTP layers and a vllm or sglang rollout drafts with them, refused by key elsewhere."""

from __future__ import annotations

import pytest
from rlcore_testkit.runs import dry_run

MTP = "actor_rollout_ref.model.mtp"
MEGATRON = "actor_rollout_ref.actor.strategy=megatron"


def test_mtp_training_on_megatron_is_accepted() -> None:
    """verl's MTP keys with the Megatron backend and a vllm rollout pass the dry run."""
    result = dry_run(
        MEGATRON,
        "actor_rollout_ref.rollout.name=vllm",
        f"{MTP}.enable=true",
        f"{MTP}.enable_train=true",
        f"{MTP}.enable_rollout=true",
        f"{MTP}.mtp_loss_scaling_factor=0.2",
        f"{MTP}.detach_encoder=true",
    )
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ((f"{MTP}.enable=true",), f"{MTP}.enable=true needs the Megatron backend"),
        ((MEGATRON, f"{MTP}.enable_train=true"), f"{MTP}.enable_train=true needs {MTP}.enable=true"),
        (
            (MEGATRON, f"{MTP}.enable=true", f"{MTP}.enable_rollout=true"),
            f"{MTP}.enable_rollout=true: speculative decoding with the MTP layers needs "
            "actor_rollout_ref.rollout.name=vllm or sglang, not hf",
        ),
    ],
)
def test_mtp_settings_nothing_honours_are_refused_by_key(overrides: tuple[str, ...], message: str) -> None:
    """MTP on another backend, a switch without ``enable``, and speculative decoding on the HF rollout are
    errors naming the key."""
    result = dry_run(*overrides)
    assert result.exit_code == 2
    assert message in result.output
