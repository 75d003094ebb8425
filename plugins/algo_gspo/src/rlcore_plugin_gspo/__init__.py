"""rlcore plugin: the GSPO policy loss (``actor_rollout_ref.actor.policy_loss.loss_mode=gspo``) and the
``gspo`` preset."""

__version__ = "0.1.0"
