"""rlcore plugin: the GRPO advantage estimator (``algorithm.adv_estimator=grpo``)."""

__version__ = "0.1.0"
