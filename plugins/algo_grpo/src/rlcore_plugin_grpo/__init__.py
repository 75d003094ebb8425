"""rlcore plugin: the GRPO advantage estimators ``grpo`` and ``grpo_passk`` (``algorithm.adv_estimator``)."""

__version__ = "0.1.0"
