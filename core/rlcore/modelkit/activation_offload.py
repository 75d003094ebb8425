"""Activation offloading (verl's ``{actor_rollout_ref,critic}.model.enable_activation_offload``).

During the update's forward pass every tensor autograd saves for the backward pass is moved to host memory
(``torch.autograd.graph.save_on_cpu``, pinned when the device is CUDA) and brought back when the backward
pass needs it: GPU memory for activations is traded for host-device copies. The gradients are the same.
On a CPU-only run the activations already live in host memory, so the switch changes nothing there; the
dry run says so (:func:`activation_offload_notes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlcore.config.sections.actor_rollout_ref import ModelConfig
    from rlcore.config.sections.critic import CriticModelConfig

__all__ = ["activation_offload", "activation_offload_notes"]


def activation_offload(enabled: bool, device: Any) -> AbstractContextManager[Any]:
    """The context to run a training forward pass in: saved tensors go to host memory when ``enabled``
    (pinned memory when ``device`` is a CUDA device), else nothing happens."""
    if not enabled:
        return nullcontext()
    import torch

    pin = torch.device(device).type == "cuda"
    return torch.autograd.graph.save_on_cpu(pin_memory=pin)


def activation_offload_notes(device: str, models: Iterable[ModelConfig | CriticModelConfig]) -> list[str]:
    """The run plan's note for a CPU run (``trainer.device``) whose trained ``models`` (typed model sections
    with ``enable_activation_offload``: ``actor_rollout_ref.model``, ``critic.model``) set it: the activations
    are in host memory already."""
    if device != "cpu":
        return []
    return [
        f"{model.key('enable_activation_offload')}=True changes nothing in rlcore on trainer.device=cpu: the "
        "activations are in host memory already (on a GPU they are moved there during the update)"
        for model in models
        if model.enable_activation_offload is True
    ]
