"""rlcore plugin: the RLOO advantage estimator (``algorithm.adv_estimator=rloo``)."""

__version__ = "0.1.0"
