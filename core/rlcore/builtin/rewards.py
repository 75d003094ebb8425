"""Built-in reward managers: naive, batch and prime (the LLM judge is rlcore-plugin-judge's; the rule-based
scorers are the plugins': GSM8K, MATH and Geometry3K rlcore-plugin-tasks', the code scorers rlcore-plugin-sandbox's)."""

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
