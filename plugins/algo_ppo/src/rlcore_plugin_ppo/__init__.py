"""rlcore plugin: PPO's GAE advantage estimator (``algorithm.adv_estimator=gae``), which needs a critic."""

__version__ = "0.1.0"
