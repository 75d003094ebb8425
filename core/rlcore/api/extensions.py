"""Step extensions: how a plugin adds a worker group, a stage of the training step and an actor loss term.

A plugin returns :class:`StepExtension` objects from the ``step_extensions(config)`` hook for the runs its
config switches on (for example ``distillation.enabled=true``). For each one the controller

1. builds a worker group of class ``worker`` (a ``module:attr`` target, a subclass of
   :class:`rlcore.workers.base.WorkerBase` whose ``ROLES`` holds ``name``) on the ``train`` resource pool,
   with role ``name``, and calls its ``init_model()`` with the other groups';
2. calls ``group.<method>(batch)`` on every training batch after the reward, the old log-probs, the reference
   log-probs and the values, before the advantages (the stage is timed as ``timing_s/<name>``); the
   returned Batch's tensors join the batch under their names, and its ``meta["metrics"]`` join the step's
   metrics;
3. in every actor worker, imports ``loss_term`` (a ``module:attr`` factory ``factory(config) -> term``)
   and applies ``term(log_prob, micro_batch, loss) -> (loss, metrics)`` to the actor loss of each
   micro-batch, after the policy, entropy and KL terms (:func:`rlcore.algos.losses.build_actor_loss`).

This module imports only the standard library: hooks modules build these objects at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlcore.errors import RLCoreError


@dataclass(frozen=True)
class StepExtension:
    """One plugin addition to the training step (see the module docstring); each part is optional.

    ``name`` names the worker group's role, the timing metric and the extension in errors; it must be unique
    among a run's extensions. ``worker`` and ``method`` go together: both or neither.
    """

    name: str
    worker: str | None = None
    method: str | None = None
    loss_term: str | None = None

    def __post_init__(self) -> None:
        """Reject an extension whose worker and method do not come together, or whose targets are not
        ``module:attr`` strings."""
        if not self.name or not self.name.replace("_", "").isalnum():
            raise RLCoreError(f"step extension name {self.name!r}: use letters, digits and underscores")
        if (self.worker is None) != (self.method is None):
            raise RLCoreError(f"step extension {self.name!r}: give both worker and method, or neither")
        for field, target in (("worker", self.worker), ("loss_term", self.loss_term)):
            if target is not None and ":" not in target:
                raise RLCoreError(f"step extension {self.name!r}: {field}={target!r} is not a 'module:attr' target")


def collect_step_extensions(results: list[list[StepExtension] | None]) -> list[StepExtension]:
    """Flatten the ``step_extensions`` hook's results (one list or None per plugin) and reject two
    extensions of the same name."""
    extensions: list[StepExtension] = []
    for result in results:
        for extension in result or ():
            if not isinstance(extension, StepExtension):
                raise RLCoreError(f"the step_extensions hook returned {extension!r}, not a StepExtension")
            if any(extension.name == other.name for other in extensions):
                raise RLCoreError(f"two plugins return a step extension named {extension.name!r}")
            extensions.append(extension)
    return extensions
