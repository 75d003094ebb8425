"""rlcore plugin: the ReMax advantage estimator (``algorithm.adv_estimator=remax``), whose baseline is the
reward of a greedy response to the same prompt."""

__version__ = "0.1.0"
