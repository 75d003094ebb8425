"""rlcore plugin: the SAPO policy loss (``actor_rollout_ref.actor.policy_loss.loss_mode=sapo``) and its keys ``actor_rollout_ref.actor.tau_pos``/``tau_neg``."""

__version__ = "0.1.0"
