"""The rollout engine's expert parallelism (``actor_rollout_ref.rollout.expert_parallel_size``, verl's key).

A mixture-of-experts model served with expert parallelism keeps a share of each layer's experts on each of the
engine's GPUs and sends every token to the GPUs of its experts, instead of splitting every expert over the
tensor-parallel ranks. The engines take it as verl passes it to them:

- **vllm**: vLLM has one switch, ``enable_expert_parallel`` (set when the size is above 1), and then spreads the
  experts over all the ranks of the engine: its tensor-parallel ranks (rlcore's vLLM engines have no data
  parallelism of their own). So on CUDA the size must equal ``rollout.tensor_model_parallel_size``, as verl
  requires (``expert_parallel_size == tensor_model_parallel_size × data_parallel_size``). On
  ``trainer.device=cpu`` each vLLM engine is one process (tensor parallelism is not used there): vLLM still runs
  with ``enable_expert_parallel``, over that one rank, and the plan says so.
- **sglang**: ``ep_size``; SGLang divides the tensor-parallel ranks into expert groups, so the size must divide
  ``rollout.tensor_model_parallel_size`` (each expert is then split over ``tp / ep`` ranks).
- **hf**: one whole model per rank, no expert parallelism: a size above 1 is an error naming the key.

Another engine (a plugin's) reads the key itself; only its value is checked here. Imports no torch unless the
size is above 1 with ``trainer.device=auto``.
"""

from __future__ import annotations

from rlcore.config.keys import ROLLOUT_KEY
from rlcore.config.sections.rollout import RolloutConfig
from rlcore.config.sections.trainer import TrainerConfig
from rlcore.errors import RLCoreError

__all__ = ["EP_KEY", "expert_parallel_notes", "expert_parallel_problems", "expert_parallel_size"]

#: the config key, as messages name it
EP_KEY = f"{ROLLOUT_KEY}.expert_parallel_size"
TP_KEY = f"{ROLLOUT_KEY}.tensor_model_parallel_size"


def expert_parallel_size(rollout: RolloutConfig) -> int:
    """The ``expert_parallel_size`` of the rollout section; anything but a positive integer is an error naming
    the key."""
    value = rollout.expert_parallel_size
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RLCoreError(f"{EP_KEY}={value!r}: must be a positive integer (1: no expert parallelism)")
    return value


def _on_cpu(trainer: TrainerConfig) -> bool:
    """Whether the run's engines are on the CPU (``trainer.device``; ``auto`` without CUDA)."""
    device = str(trainer.device)
    if device == "auto":
        import torch

        return not torch.cuda.is_available()
    return device == "cpu"


def _sizes(rollout: RolloutConfig) -> tuple[str, int, int]:
    """The engine's name, the expert-parallel size and the tensor-parallel size of the rollout section."""
    return str(rollout.name), expert_parallel_size(rollout), int(rollout.tensor_model_parallel_size)


def expert_parallel_problems(rollout: RolloutConfig, trainer: TrainerConfig) -> list[str]:
    """What the rollout engine cannot do with the asked expert parallelism (module docstring), each naming
    the key."""
    try:
        name, ep, tp = _sizes(rollout)
    except RLCoreError as exc:
        return [str(exc)]
    if ep == 1:
        return []
    if name == "hf":
        return [
            f"{EP_KEY}={ep}: the hf rollout engine holds the whole model on each rank and has no expert "
            f"parallelism; set it to 1, or serve the model with {ROLLOUT_KEY}.name=vllm or sglang"
        ]
    if name == "vllm" and ep != tp and not _on_cpu(trainer):
        return [
            f"{EP_KEY}={ep}: vLLM spreads the experts over all the ranks of an engine (enable_expert_parallel), "
            f"so it must equal {TP_KEY}={tp} (as in verl: tensor × data-parallel size; rlcore's vLLM engines have "
            "no data parallelism of their own)"
        ]
    if name == "sglang" and tp % ep:
        return [
            f"{EP_KEY}={ep}: SGLang divides the tensor-parallel ranks into expert groups (ep_size), so it must "
            f"divide {TP_KEY}={tp}"
        ]
    return []


def expert_parallel_notes(rollout: RolloutConfig, trainer: TrainerConfig) -> list[str]:
    """The plan's note for vLLM expert parallelism on ``trainer.device=cpu``: vLLM runs with
    ``enable_expert_parallel`` over the engine's one process."""
    try:
        name, ep, tp = _sizes(rollout)
    except RLCoreError:
        return []
    if ep == 1 or name != "vllm" or not _on_cpu(trainer):
        return []
    return [
        f"{EP_KEY}={ep}: on the CPU each vLLM engine is one process, so vLLM runs with enable_expert_parallel "
        f"over that one rank (every expert in it); on CUDA it must equal {TP_KEY} ({tp})"
    ]
