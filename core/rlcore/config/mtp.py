"""``actor_rollout_ref.model.mtp`` (verl's multi-token prediction keys): the checks of the settings before a run.

The Megatron backend builds and trains the MTP layers (rlcore-plugin-megatron); the vllm and sglang rollouts pass
``enable_rollout``'s speculative-decoding settings to their engines. What cannot honour them is refused here, by
key. This module reads the typed sections only (no torch): it runs in the dry run.
"""

from __future__ import annotations

from rlcore.config.schema import ActorRolloutRefConfig

KEY = "actor_rollout_ref.model.mtp"
#: the rollout engines that draft tokens with the MTP layers (vLLM's speculative_config, SGLang's EAGLE settings)
SPECULATIVE_ROLLOUTS: tuple[str, ...] = ("vllm", "sglang")


def mtp_problems(policy: ActorRolloutRefConfig) -> list[str]:
    """The settings that contradict ``model.mtp``, each naming its key (none when MTP is off)."""
    mtp = policy.model.mtp
    problems = [
        f"{KEY}.{name}=true needs {KEY}.enable=true (the model's MTP layers)"
        for name in ("enable_train", "enable_rollout")
        if getattr(mtp, name) is True and mtp.enable is not True
    ]
    if mtp.enable is True and policy.actor.strategy != "megatron":
        problems.append(
            f"{KEY}.enable=true needs the Megatron backend (actor_rollout_ref.actor.strategy=megatron, "
            f"rlcore-plugin-megatron), not {policy.actor.key('strategy')}={policy.actor.strategy}"
        )
    if mtp.enable_rollout is True and policy.rollout.name not in SPECULATIVE_ROLLOUTS:
        problems.append(
            f"{KEY}.enable_rollout=true: speculative decoding with the MTP layers needs "
            f"actor_rollout_ref.rollout.name={' or '.join(SPECULATIVE_ROLLOUTS)}, not {policy.rollout.name}"
        )
    return problems
