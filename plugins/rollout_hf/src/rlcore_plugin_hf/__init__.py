"""rlcore plugin: the Hugging Face transformers rollout engine (``actor_rollout_ref.rollout.name=hf``, the default)."""

__version__ = "0.1.0"
