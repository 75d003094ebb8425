"""rlcore's generic workers: the roles the controller's groups run on every rank.

- :mod:`rlcore.workers.actor` / :mod:`rlcore.workers.critic` / :mod:`rlcore.workers.reward_model`: the
  workers, each holding one :class:`~rlcore.api.training.TrainingEngine` per model (the contract is in
  :mod:`rlcore.api.training`; the Hugging Face pieces the engines share are in :mod:`rlcore.modelkit`).
- :mod:`rlcore.workers.base`: rank set-up and engine creation shared by the workers (and an algorithm's own
  worker, such as PRIME's reward model).
- :mod:`rlcore.workers.ppo_loop`, :mod:`rlcore.workers.micro_batches`: the update loop and its micro-batches;
  the batch arithmetic is :mod:`rlcore.config.batch_sizes`.
"""
