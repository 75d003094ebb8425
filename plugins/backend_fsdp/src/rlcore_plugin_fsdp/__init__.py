"""rlcore-plugin-fsdp: the PyTorch FSDP2 training engine (``actor_rollout_ref.actor.strategy=fsdp``).

Importing this package is cheap; the engine (and torch) lives in :mod:`rlcore_plugin_fsdp.engine`,
imported only when a run selects the backend. rlcore's generic workers (:mod:`rlcore.workers`) drive it.
"""

__version__ = "0.1.0"
