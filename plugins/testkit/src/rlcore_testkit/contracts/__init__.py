"""One contract suite per component kind. Subclass one in a ``Test...`` class and set ``component_name``::

    from rlcore_testkit.contracts import AdvantageEstimatorContract

    class TestMyEstimator(AdvantageEstimatorContract):
        component_name = "my_estimator"

The suites test behaviour (shapes, masks, determinism under a seed, metric keys, the direction of the
learning signal), not merely that a class exists. They need torch; import them from test modules only.
"""

from rlcore_testkit.contracts.agents import (
    AgentLoopContract,
    InteractionContract,
    RetrieverContract,
    ToolContract,
    ToolParserContract,
)
from rlcore_testkit.contracts.algorithms import AdvantageEstimatorContract, PolicyLossContract
from rlcore_testkit.contracts.backend import TrainingBackendContract
from rlcore_testkit.contracts.components import BatchFilterContract, PresetContract
from rlcore_testkit.contracts.data import DatasetContract
from rlcore_testkit.contracts.health import HealthMonitorContract
from rlcore_testkit.contracts.rewards import RewardManagerContract, RewardScorerContract
from rlcore_testkit.contracts.rollout import RolloutEngineContract
from rlcore_testkit.contracts.tracker import TrackerContract
from rlcore_testkit.contracts.transport import WeightTransportContract

#: component kind -> its contract suite
CONTRACTS = {
    "advantage_estimator": AdvantageEstimatorContract,
    "policy_loss": PolicyLossContract,
    "training_backend": TrainingBackendContract,
    "batch_filter": BatchFilterContract,
    "preset": PresetContract,
    "dataset": DatasetContract,
    "reward_manager": RewardManagerContract,
    "reward_scorer": RewardScorerContract,
    "rollout_engine": RolloutEngineContract,
    "tracker": TrackerContract,
    "tool": ToolContract,
    "agent_loop": AgentLoopContract,
    "interaction": InteractionContract,
    "tool_parser": ToolParserContract,
    "retriever": RetrieverContract,
    "health_monitor": HealthMonitorContract,
    "weight_transport": WeightTransportContract,
}

__all__ = [
    "CONTRACTS",
    "AdvantageEstimatorContract",
    "AgentLoopContract",
    "BatchFilterContract",
    "DatasetContract",
    "HealthMonitorContract",
    "InteractionContract",
    "PolicyLossContract",
    "PresetContract",
    "RetrieverContract",
    "RewardManagerContract",
    "RewardScorerContract",
    "RolloutEngineContract",
    "ToolContract",
    "ToolParserContract",
    "TrackerContract",
    "TrainingBackendContract",
    "WeightTransportContract",
]
