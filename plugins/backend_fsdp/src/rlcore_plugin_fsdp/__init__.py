"""rlcore-plugin-fsdp: the PyTorch FSDP2 training backend (``actor_rollout_ref.actor.strategy=fsdp``).

Importing this package is cheap; the workers (and torch) live in :mod:`rlcore_plugin_fsdp.actor` and
:mod:`rlcore_plugin_fsdp.critic`, imported only when a run selects the backend.
"""

__version__ = "0.1.0"
