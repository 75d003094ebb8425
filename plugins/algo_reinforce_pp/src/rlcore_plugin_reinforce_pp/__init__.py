"""rlcore plugin: the REINFORCE++ advantage estimators ``reinforce_plus_plus`` and
``reinforce_plus_plus_baseline`` (``algorithm.adv_estimator``)."""

__version__ = "0.1.0"
