"""rlcore plugin: the Clip-Cov and KL-Cov policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode=
clip_cov|kl_cov``), which keep the policy's entropy from collapsing."""

__version__ = "0.1.0"
