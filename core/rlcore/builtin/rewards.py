"""Built-in reward managers and the rule-based scorers for GSM8K, MATH and Geometry3K (the code
scorer is rlcore-plugin-sandbox's)."""

from rlcore.api.specs import RewardScorerSpec
from rlcore.hookspecs import hookimpl


@hookimpl
def register_reward_managers(register):
    """Register the per-sample and the batched reward managers."""
    register("naive", "rlcore.reward.managers:NaiveRewardManager", description="scores one sample at a time")
    register("batch", "rlcore.reward.managers:BatchRewardManager", description="one scorer call for the whole batch")
    register(
        "prime",
        "rlcore.reward.managers:PrimeRewardManager",
        description="verl's PRIME verifier: parallel scoring with a timeout, scores also as the acc column",
    )
    register(
        "judge",
        "rlcore.reward.judge:JudgeRewardManager",
        description="an LLM judge (reward_model.model.path on reward_model.rollout.name) grades each response",
    )


@hookimpl
def register_reward_scorers(register):
    """Register rule-based scorers by data_source; ``RewardScorerSpec(ground_truth="text")`` marks the scorers that compare the
    ground truth as text (the reward manager passes it to them as text, see ``rlcore.reward.ground_truth``)."""
    register(
        "openai/gsm8k",
        "rlcore.reward.scorers.gsm8k:score",
        spec=RewardScorerSpec(ground_truth="text"),
        description="GSM8K '#### N' answer match",
        aliases=("gsm8k",),
    )
    register(
        "lighteval/MATH",
        "rlcore.reward.scorers.math:score",
        spec=RewardScorerSpec(ground_truth="text"),
        description="MATH \\boxed{} answer match (math-verify when installed)",
        aliases=("DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500", "math"),
    )
    register(
        "hiyouga/geometry3k",
        "rlcore.reward.scorers.geo3k:score",
        spec=RewardScorerSpec(ground_truth="text"),
        description="Geometry3K: 0.9 x \\boxed{} answer match + 0.1 x <think>...</think> format",
        aliases=("geo3k",),
    )
