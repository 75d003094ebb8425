"""The plugin's hooks: the ``judge`` reward manager (an LLM grades each response).

This module must stay free of torch imports: ``rlcore plugins`` and config loading import it.
"""

from rlcore import hookimpl

#: the rlcore plugin API versions this plugin supports (rlcore refuses to load it outside them)
RLCORE_API = ">=3,<4"


@hookimpl
def register_reward_managers(register):
    """Register the LLM judge as the reward manager ``judge``."""
    register(
        "judge",
        "rlcore_plugin_judge.judge:JudgeRewardManager",
        description="an LLM judge (reward_model.model.path on reward_model.rollout.name) grades each response",
    )
