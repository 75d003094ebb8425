"""rlcore-plugin-deepspeed: the DeepSpeed ZeRO training engine (``actor_rollout_ref.actor.strategy=deepspeed``).

Importing this package is cheap; the engine (and torch, deepspeed) lives in
:mod:`rlcore_plugin_deepspeed.engine`, imported only when a run selects the backend. rlcore's generic
workers (:mod:`rlcore.workers`) drive it.
"""

__version__ = "0.1.0"
