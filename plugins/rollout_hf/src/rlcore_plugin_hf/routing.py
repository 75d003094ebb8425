"""Recording a mixture-of-experts model's routing while the HF rollout engine samples (R3).

With ``actor_rollout_ref.rollout.enable_rollout_routing_replay`` the engine records, for every token it
feeds through the model (the prompt in the prefill, each sampled token when it is fed back), the experts
that every sparse layer's router chose. :class:`RoutingRecorder` hooks the routers for the duration of one
chunk's decoding loop and hands back what they chose as ``[rows, tokens, L, k]``; :func:`place_routing` lays a chunk's record out as the rollout's ``input_ids``
(:data:`rlcore.api.training.ROUTED_EXPERTS`: left-padded prompt, right-padded response, ``-1`` at padding
and at each row's last response token, which is never fed through the model).

The routers are those :func:`rlcore.modelkit.moe.sparse_routers` finds (the training forward hooks the same
ones): a softmax top-k router module whose forward returns ``(logits, weights, indices)``, the indices
``[tokens, k]`` of the chosen experts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch

from rlcore.api import RLCoreError, sparse_routers
from rlcore_plugin_hf.routing_plan import REPLAY_KEY

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

__all__ = ["ROUTING_DTYPE", "RoutingRecorder", "place_routing"]

#: the dtype of a recorded routing tensor (expert indices; -1 where nothing was recorded)
ROUTING_DTYPE = torch.int32


def _chosen_experts(output: Any) -> torch.Tensor:
    """The ``[tokens, k]`` integer expert indices among a router's outputs."""
    parts = output if isinstance(output, tuple) else (output,)
    for part in reversed(parts):
        if isinstance(part, torch.Tensor) and not part.is_floating_point():
            return part
    raise RLCoreError(
        f"{REPLAY_KEY}: a router of this model returns no integer expert indices, so its routing "
        "cannot be recorded; set it to false"
    )


class RoutingRecorder:
    """Records the experts every sparse layer of ``module`` chooses, forward after forward.

    Use it as a context manager around the forwards to record (hooks are only attached inside), then
    :meth:`collect` once per chunk of rows.

    Raises:
        RLCoreError: ``module`` has no sparse layers (a dense model), naming the key and the model type.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self.routers = sparse_routers(module)
        if not self.routers:
            model_type = getattr(getattr(module, "config", None), "model_type", type(module).__name__)
            raise RLCoreError(
                f"{REPLAY_KEY}=true records the routing of a mixture-of-experts model, but the "
                f"policy (model_type {model_type!r}) has no sparse layers; set it to false"
            )
        self.top_k = int(cast(Any, self.routers[0]).top_k)
        self._captured: list[list[torch.Tensor]] = [[] for _ in self.routers]
        self._handles: list[RemovableHandle] = []

    def __enter__(self) -> RoutingRecorder:
        """Attach the hooks (dropping anything left from a forward that raised)."""
        for captured in self._captured:
            captured.clear()
        for layer, router in enumerate(self.routers):
            self._handles.append(router.register_forward_hook(self._hook(layer)))
        return self

    def __exit__(self, *exc: object) -> None:
        """Detach the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _hook(self, layer: int) -> Any:
        """The forward hook of sparse layer ``layer``: keep the indices its router chose."""

        def hook(_module: torch.nn.Module, _args: Any, output: Any) -> None:
            self._captured[layer].append(_chosen_experts(output).to(ROUTING_DTYPE))

        return hook

    def collect(self, rows: int) -> torch.Tensor:
        """What the routers chose since the last call, as ``[rows, tokens, L, k]``, ``tokens`` in the order
        they were fed (each forward's ``[rows, width]`` inputs flattened row-major); clears the record."""
        layers = []
        for captured in self._captured:
            chosen = [indices.view(rows, -1, self.top_k) for indices in captured]
            layers.append(
                torch.cat(chosen, dim=1) if chosen else torch.empty((rows, 0, self.top_k), dtype=ROUTING_DTYPE)
            )
            captured.clear()
        return torch.stack(layers, dim=2)


def place_routing(
    recorded: torch.Tensor, first_column: int, prompt_width: int, sequence_mask: torch.Tensor
) -> torch.Tensor:
    """A chunk's routing laid out as its ``input_ids`` ``[rows, P + R]`` (``P = prompt_width``; the width
    of ``sequence_mask``, the prompt mask then the response mask, is ``P + R``): ``recorded [rows, n, L, k]``
    holds the tokens fed through the model from column ``first_column`` on (the chunk's prompts without
    their common left padding, then the response tokens fed back). ``-1`` where nothing was recorded, where
    ``sequence_mask`` is 0 and at each row's last response token."""
    rows, fed, layers, top_k = recorded.shape
    placed = torch.full(
        (rows, sequence_mask.shape[1], layers, top_k), -1, dtype=ROUTING_DTYPE, device=sequence_mask.device
    )
    placed[:, first_column : first_column + fed] = recorded.to(placed.device)
    valid = sequence_mask.bool().clone()
    response_lengths = valid[:, prompt_width:].sum(dim=1)
    answered = torch.nonzero(response_lengths > 0).squeeze(1)
    valid[answered, prompt_width + response_lengths[answered] - 1] = False
    placed[~valid] = -1
    return placed
