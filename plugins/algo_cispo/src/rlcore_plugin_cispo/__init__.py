"""rlcore plugin: the CISPO policy loss (``actor_rollout_ref.actor.policy_loss.loss_mode=cispo``)."""

__version__ = "0.1.0"
