"""rlcore's generic workers and the training-engine contract that backends implement.

- :mod:`rlcore.workers.engine`: :class:`~rlcore.workers.engine.TrainingEngine` (the contract, no torch
  import), :class:`~rlcore.workers.engine.EngineRequest`, :class:`~rlcore.workers.engine.ModelOutput`.
- :mod:`rlcore.workers.actor` / :mod:`rlcore.workers.critic`: the workers the controller's groups run.
- :mod:`rlcore.workers.ppo_loop`, :mod:`rlcore.workers.batch_sizes`, :mod:`rlcore.workers.micro_batches`:
  the update loop and its batch arithmetic.
- :mod:`rlcore.workers.optim`, :mod:`rlcore.workers.distributed`: helpers an engine may use (AdamW with
  verl's LR schedule; device, process group, seeding and RNG state).
"""
