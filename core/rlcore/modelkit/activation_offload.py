"""Activation offloading (verl's ``{actor_rollout_ref,critic}.model.enable_activation_offload``).

During the update's forward pass every tensor autograd saves for the backward pass is moved to host memory
(``torch.autograd.graph.save_on_cpu``, pinned when the device is CUDA) and brought back when the backward
pass needs it: GPU memory for activations is traded for host-device copies. The gradients are the same.
On a CPU-only run the activations already live in host memory, so the switch changes nothing there; the
dry run says so (:func:`activation_offload_notes`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

__all__ = ["MODEL_SECTIONS", "activation_offload", "activation_offload_notes", "offload_enabled"]

#: the model sections whose ``enable_activation_offload`` a training engine reads
MODEL_SECTIONS = ("actor_rollout_ref.model", "critic.model")


def offload_enabled(model_config: Any) -> bool:
    """Whether the model section ``model_config`` (``actor_rollout_ref.model``, ``critic.model``) asks for
    activation offloading."""
    return bool(model_config.get("enable_activation_offload", False))


def activation_offload(enabled: bool, device: Any) -> AbstractContextManager[Any]:
    """The context to run a training forward pass in: saved tensors go to host memory when ``enabled``
    (pinned memory when ``device`` is a CUDA device), else nothing happens."""
    if not enabled:
        return nullcontext()
    import torch

    pin = torch.device(device).type == "cuda"
    return torch.autograd.graph.save_on_cpu(pin_memory=pin)


def activation_offload_notes(config: Any) -> list[str]:
    """The run plan's note for a CPU run that sets ``enable_activation_offload``: the activations are in host
    memory already."""
    from omegaconf import OmegaConf

    if OmegaConf.select(config, "trainer.device", default=None) != "cpu":
        return []
    return [
        f"{section}.enable_activation_offload=True changes nothing in rlcore on trainer.device=cpu: the "
        "activations are in host memory already (on a GPU they are moved there during the update)"
        for section in MODEL_SECTIONS
        if OmegaConf.select(config, f"{section}.enable_activation_offload", default=False) is True
    ]
