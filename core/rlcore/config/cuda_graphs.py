"""The batch sizes the rollout engine captures CUDA graphs for (``actor_rollout_ref.rollout.cudagraph_capture_sizes``,
verl's key).

An engine that replays its decoding steps as CUDA graphs captures one graph per batch size and pads a step's
batch up to the nearest captured size. The engines take the key as verl passes it to them:

- **vllm**: ``compilation_config.cudagraph_capture_sizes`` (merged into a ``compilation_config`` given in
  ``vllm.engine_kwargs``), on CUDA while ``enforce_eager`` is false;
- **sglang**: ``cuda_graph_bs`` (SGLang's cuda-graph batch sizes), while ``enforce_eager`` (SGLang's
  ``disable_cuda_graph``) is false; verl's SGLang rollout leaves the key out;
- **hf**: its graphs are captured per batch-size bucket of its own (1, 2, 4, 8, then multiples of 16 up to
  256, then of 64; ``rlcore.rollout.sizing.bucket``), which also size its chunks of rows: a list is an error
  naming the key.

With ``enforce_eager=true`` or on the CPU no graph is captured, and the plan's note says the key changes
nothing there. Another engine (a plugin's) reads the key itself.
"""

from __future__ import annotations

from rlcore.config.keys import ROLLOUT_KEY
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.config.sections.trainer import TrainerConfig

__all__ = ["CAPTURE_KEY", "capture_sizes_notes", "capture_sizes_problems"]

#: the config key, as messages name it
CAPTURE_KEY = f"{ROLLOUT_KEY}.cudagraph_capture_sizes"


def capture_sizes_problems(rollout: RolloutConfig) -> list[str]:
    """The hf engine with a list of capture sizes (module docstring), naming the key."""
    if rollout.cudagraph_capture_sizes is None or rollout.name != "hf":
        return []
    return [
        f"{CAPTURE_KEY}={rollout.cudagraph_capture_sizes}: the hf rollout engine captures its CUDA graphs per "
        "batch-size bucket of its own (1, 2, 4, 8, then multiples of 16 up to 256, then of 64), which also size "
        f"its chunks of rows; leave it null, or serve with {ROLLOUT_KEY}.name=vllm or sglang"
    ]


def capture_sizes_notes(rollout: RolloutConfig, trainer: TrainerConfig) -> list[str]:
    """The plan's note when the capture sizes are set but no CUDA graph is captured (``enforce_eager=true``,
    or ``trainer.device=cpu``)."""
    sizes = rollout.cudagraph_capture_sizes
    if sizes is None or rollout.name == "hf":
        return []
    if rollout.enforce_eager:
        return [f"{CAPTURE_KEY}={sizes} changes nothing: {ROLLOUT_KEY}.enforce_eager=true captures no CUDA graph"]
    if str(trainer.device) == "cpu":
        return [f"{CAPTURE_KEY}={sizes} changes nothing on the CPU (no CUDA graphs there)"]
    return []
