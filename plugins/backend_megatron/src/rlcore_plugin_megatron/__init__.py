"""rlcore-plugin-megatron: the megatron-core training engine (``actor_rollout_ref.actor.strategy=megatron``).

Importing this package is cheap; the engine (and torch, megatron-core) lives in
:mod:`rlcore_plugin_megatron.engine`, imported only when a run selects the backend.
"""

__version__ = "0.1.0"
