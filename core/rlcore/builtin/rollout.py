"""Built-in rollout engine: batched sampling with Hugging Face transformers, works anywhere."""

from rlcore.hookspecs import hookimpl


@hookimpl
def register_rollout_engines(register):
    """Register the HF rollout engine."""
    register("hf", "rlcore.rollout.hf:HFRolloutEngine", description="transformers KV-cache sampler (CPU/GPU)")
