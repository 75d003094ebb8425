"""rlcore plugin: the SGLang rollout engine (``actor_rollout_ref.rollout.name=sglang``)."""

__version__ = "0.1.0"
