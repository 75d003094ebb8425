"""What the engine sees of megatron-core's MoE routers: the experts each token was routed to, load statistics,
and routing replay (``router_replay.mode`` R2/R3).

megatron-core's ``TopKRouter`` computes its top-k through ``router.router_replay.get_replay_topk(scores, topk,
num_groups, group_topk, default_compute_topk)`` when ``router.router_replay`` is set. megatron-core's own
``RouterReplay`` replays every token of a layer and keeps its instances in a process-wide list; rlcore needs
``-1`` entries (recompute those tokens), per-engine state and the recomputed choice beside the replayed one, so
:class:`RouterTap` is installed in its place (same method, our own object per router).

Token order: a router sees ``[S, B]`` hidden states flattened to ``S·B`` tokens, token ``s·B + b``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlcore.api import load_balancing_loss


@dataclass
class RouterCall:
    """One router call: the recomputed top-k ``[T, k]``, the experts used ``[T, k]`` (replayed where a target
    was given) and the full softmax over the experts ``[T, E]`` (for the statistics)."""

    recomputed: torch.Tensor
    used: torch.Tensor
    probs: torch.Tensor
    replayed: torch.Tensor | None


class RouterTap:
    """Stands in for megatron-core's ``RouterReplay`` on one router: records each call and, given a
    :attr:`target`, routes every token whose target row has no ``-1`` to those experts (the others keep the
    recomputed top-k).

    Activation recomputation (``recompute_granularity``) runs a layer's forward again inside the backward pass;
    that call must route as the forward did, whichever micro-batch's :attr:`target` is set by then (with pipeline
    stages every micro-batch runs forward before the first backward). So every forward call pushes the experts
    it used on :attr:`forwards`, and a call made inside the backward pass (autograd's graph task is running)
    pops the latest and routes to exactly those: the backward passes of a layer run in the reverse order of its
    forward passes. It is not recorded in :attr:`calls`."""

    def __init__(self, pre_softmax: bool) -> None:
        """``pre_softmax``: the router ranks softmax probabilities (else logits, ``moe_router_pre_softmax``)."""
        self.pre_softmax = pre_softmax
        self.target: torch.Tensor | None = None
        self.calls: list[RouterCall] = []
        self.forwards: list[torch.Tensor] = []

    def get_replay_topk(
        self,
        scores: torch.Tensor,
        topk: int,
        num_groups: int | None = None,
        group_topk: int | None = None,
        default_compute_topk: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The top-k ``(scores, indices)`` of ``scores [T, E]`` as megatron-core's router asks for them."""
        values, indices = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        if torch._C._current_graph_task_id() != -1:  # recomputed inside the backward pass
            used = self.forwards.pop().to(device=scores.device, dtype=indices.dtype)
            return scores.gather(1, used), used
        used, replayed = indices, None
        if self.target is not None:
            target = self.target.to(device=scores.device, dtype=indices.dtype)
            replayed = (target >= 0).all(-1)
            used = torch.where(replayed[:, None], target, indices)
            values = scores.gather(1, used)
        with torch.no_grad():
            probs = scores.detach().float() if self.pre_softmax else torch.softmax(scores.detach().float(), dim=-1)
        self.calls.append(RouterCall(indices.detach(), used.detach(), probs, replayed))
        self.forwards.append(used.detach())
        return values, used


def install_taps(chunks: list[Any], pre_softmax: bool) -> list[RouterTap]:
    """A :class:`RouterTap` on the router of every MoE layer of ``chunks`` (model chunks in order), in layer
    order."""
    taps: list[RouterTap] = []
    for chunk in chunks:
        for layer in chunk.decoder.layers:
            router = getattr(layer.mlp, "router", None)
            if router is not None:
                tap = RouterTap(pre_softmax)
                router.router_replay = tap
                taps.append(tap)
    return taps


def set_targets(taps: list[RouterTap], routed: torch.Tensor | None) -> None:
    """Replay ``routed`` (``[B, S, L, k]`` in the model's token layout, ``-1`` = recompute; ``L`` = ``len(taps)``)
    in the next call of each tap (None: recompute every token); forget earlier calls."""
    for index, tap in enumerate(taps):
        tap.calls = []
        tap.target = None if routed is None else routed[:, :, index, :].transpose(0, 1).reshape(-1, routed.shape[-1])


def forget_forwards(taps: list[RouterTap]) -> None:
    """Start a new pass: drop the experts earlier forward calls used (:attr:`RouterTap.forwards`)."""
    for tap in taps:
        tap.forwards = []


def routed_experts(taps: list[RouterTap], rows: int) -> torch.Tensor:
    """The experts the last call of every tap used, ``[B, S, L, k]`` (``rows = B``), sorted within each token."""
    used = [tap.calls[-1].used.sort(-1).values.reshape(-1, rows, tap.calls[-1].used.shape[-1]) for tap in taps]
    return torch.stack(used, dim=2).transpose(0, 1)


def routing_stats(taps: list[RouterTap], valid: torch.Tensor, num_experts: int) -> dict[str, float]:
    """Statistics of the last call of every tap over the ``valid`` tokens (``[B, S]`` bool in the model's layout):

    - ``moe_aux_loss``: the load-balancing loss as the FSDP engine logs it
      (:func:`rlcore.modelkit.moe.load_balancing_loss`, pooled over the layers), without the coefficient.
      megatron-core's own per-layer loss, which the gradient uses, is this divided by ``k`` per layer
      (docs/moe.md);
    - ``moe_load_max_over_mean``: the most loaded expert's token count over the mean count, averaged over the
      layers;
    - ``router_replay_agreement`` (when a target was replayed): the share of replayed tokens whose recomputed
      top-k is the replayed set.
    """
    flat = valid.transpose(0, 1).reshape(-1)
    tokens = int(flat.sum())
    if not taps or tokens == 0:
        return {}
    load, agree, replayed = 0.0, 0, 0
    counts_sum = torch.zeros(num_experts, dtype=torch.float64)
    probs_sum = torch.zeros(num_experts, dtype=torch.float64)
    for tap in taps:
        call = tap.calls[-1]
        used = call.used[flat]
        counts = torch.bincount(used.reshape(-1), minlength=num_experts).double()
        counts_sum += counts.cpu()
        probs_sum += call.probs[flat].double().sum(0).cpu()
        load += float(counts.max() / counts.mean())
        if call.replayed is not None:
            mask = call.replayed & flat
            same = (call.recomputed.sort(-1).values == call.used.sort(-1).values).all(-1)
            agree += int((same & mask).sum())
            replayed += int(mask.sum())
    aux = float(load_balancing_loss(counts_sum, probs_sum, tokens * len(taps)))
    stats = {"moe_aux_loss": aux, "moe_load_max_over_mean": load / len(taps)}
    if replayed:
        stats["router_replay_agreement"] = agree / replayed
    return stats
