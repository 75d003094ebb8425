"""rlcore plugin: the OPO advantage estimator (``algorithm.adv_estimator=opo``)."""

__version__ = "0.1.0"
