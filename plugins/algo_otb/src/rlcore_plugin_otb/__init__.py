"""rlcore plugin: the Optimal Token Baseline estimator (``algorithm.adv_estimator=optimal_token_baseline``)."""

__version__ = "0.1.0"
