"""rlcore plugin: GPG's advantage estimator (``algorithm.adv_estimator=gpg``) and policy loss
(``actor_rollout_ref.actor.policy_loss.loss_mode=gpg``)."""

__version__ = "0.1.0"
