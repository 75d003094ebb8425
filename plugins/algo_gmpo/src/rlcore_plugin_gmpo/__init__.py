"""rlcore plugin: the GMPO policy loss (``actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean``)."""

__version__ = "0.1.0"
