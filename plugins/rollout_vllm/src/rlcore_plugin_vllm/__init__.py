"""rlcore plugin: the vLLM rollout engine (``actor_rollout_ref.rollout.name=vllm``)."""

__version__ = "0.1.0"
