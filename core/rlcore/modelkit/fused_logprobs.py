"""verl's ``use_fused_kernels``: log-probs, entropies and ``Σπ²`` of the next-token distributions computed
straight from the last hidden states and the LM head, a chunk of tokens at a time, so that the
``[tokens, vocab]`` logits are never materialised whole, neither in the forward nor in the backward pass.

:class:`FusedLinearLogProbs` is the custom autograd function: its forward keeps only per-token results,
its backward recomputes each chunk's logits and turns the incoming per-token gradients into gradients of
the hidden states, the head's weight and its bias. :func:`fused_head` swaps it into a transformers model's
output-embedding module for one forward call, so the call still goes through the module's hooks (FSDP2's
unsharding, DeepSpeed ZeRO-3's gathering) and the model's own ``logits_to_keep`` slicing.

Backends (``fused_kernel_options.impl_backend``): ``torch`` runs the chunk arithmetic eagerly on any
device; ``triton`` compiles it with ``torch.compile``, whose inductor backend emits Triton kernels on CUDA
(the matrix products stay cuBLAS). :func:`rlcore.modelkit.kernels.check_kernel_switches` only lets
``triton`` through on CUDA with the triton package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from rlcore.errors import RLCoreError

#: ``fused_kernel_options.impl_backend`` values
FUSED_BACKENDS = ("torch", "triton")
#: tokens per chunk: the largest logits block alive at once is ``[CHUNK_TOKENS, vocab]`` float32
CHUNK_TOKENS = 512
#: number of per-token results the fused head returns in place of logits (log-prob, entropy, Σπ²)
FUSED_OUTPUTS = 3
#: config attributes of models whose logits are rescaled after the LM head (the fused path cannot apply them)
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")

ChunkStats = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ChunkGrad = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None], torch.Tensor
]


def _chunk_stats(z: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[3, c]`` log-prob of ``labels``, entropy and ``Σπ²`` of float32 tempered logits ``z`` ``[c, V]``, by
    the formulas of :func:`rlcore.algos.logprobs_from_logits` and its siblings (same rounding)."""
    lse = torch.logsumexp(z, dim=-1)
    picked = torch.gather(z, -1, labels.unsqueeze(-1)).squeeze(-1) - lse
    entropy = lse - (torch.softmax(z, dim=-1) * z).sum(dim=-1)
    pi2 = torch.exp(torch.logsumexp(2.0 * z, dim=-1) - 2.0 * lse)
    return torch.stack((picked, entropy, pi2))


def _chunk_grad(
    z: torch.Tensor,
    labels: torch.Tensor,
    d_logp: torch.Tensor | None,
    d_entropy: torch.Tensor | None,
    d_pi2: torch.Tensor | None,
) -> torch.Tensor:
    """The gradient ``[c, V]`` float32 with respect to tempered logits ``z`` of the three per-token results,
    given their incoming gradients (None: that result gets no gradient).

    With ``p = softmax(z)``: ``∂log p_y/∂z = onehot(y) − p``, ``∂H/∂z = −p·(log p + H)`` and
    ``∂Σp²/∂z = 2p·(p − Σp²)``.
    """
    log_p = torch.log_softmax(z, dim=-1)
    p = log_p.exp()
    grad = torch.zeros_like(z)
    if d_logp is not None:
        grad -= d_logp.unsqueeze(-1) * p
        grad.scatter_add_(-1, labels.unsqueeze(-1), d_logp.unsqueeze(-1))
    if d_entropy is not None:
        entropy = -(p * log_p).sum(dim=-1, keepdim=True)
        grad -= d_entropy.unsqueeze(-1) * p * (log_p + entropy)
    if d_pi2 is not None:
        pi2 = (p * p).sum(dim=-1, keepdim=True)
        grad += 2.0 * d_pi2.unsqueeze(-1) * p * (p - pi2)
    return grad


@functools.cache
def _chunk_functions(backend: str) -> tuple[ChunkStats, ChunkGrad]:
    """The chunk arithmetic of ``backend``: eager for ``torch``, ``torch.compile``-d for ``triton``."""
    if backend == "triton":
        return torch.compile(_chunk_stats, dynamic=True), torch.compile(_chunk_grad, dynamic=True)
    return _chunk_stats, _chunk_grad


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, temperature: float) -> torch.Tensor:
    """Float32 tempered logits of one chunk, the LM head's product taken in the model's dtype (as the
    unfused path does)."""
    logits = nn.functional.linear(hidden, weight, bias)
    return logits.float() / temperature


class FusedLinearLogProbs(torch.autograd.Function):
    """``(log p(label), entropy, Σπ²)`` of ``softmax((hidden·Wᵀ + b) / temperature)`` per token, each
    float32 ``[N]``, computed ``chunk`` tokens at a time (see the module docstring)."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        temperature: float,
        chunk: int,
        backend: str,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per-token results of ``hidden`` ``[N, H]`` under the head ``weight`` ``[V, H]`` / ``bias``."""
        ctx.set_materialize_grads(False)
        stats, _ = _chunk_functions(backend)
        logp, entropy, pi2 = (
            torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device) for _ in range(FUSED_OUTPUTS)
        )
        for start in range(0, hidden.shape[0], chunk):
            end = start + chunk
            values = stats(_logits(hidden[start:end], weight, bias, temperature), labels[start:end])
            logp[start:end], entropy[start:end], pi2[start:end] = values
        ctx.save_for_backward(hidden, weight, bias, labels)
        ctx.temperature, ctx.chunk, ctx.backend = temperature, chunk, backend
        return logp, entropy, pi2

    @staticmethod
    def backward(
        ctx: Any, d_logp: torch.Tensor | None, d_entropy: torch.Tensor | None, d_pi2: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        """Gradients of the hidden states, the weight and the bias; each chunk's logits are recomputed."""
        hidden, weight, bias, labels = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        _, grad_fn = _chunk_functions(ctx.backend)
        grad_hidden = torch.zeros_like(hidden) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_bias else None
        incoming = (d_logp, d_entropy, d_pi2)
        if all(d is None for d in incoming):
            return grad_hidden, grad_weight, grad_bias, None, None, None, None
        for start in range(0, hidden.shape[0], ctx.chunk):
            end = start + ctx.chunk
            part = hidden[start:end]
            z = _logits(part, weight, bias, ctx.temperature)
            grads = [None if d is None else d[start:end].to(z.dtype) for d in incoming]
            dz = grad_fn(z, labels[start:end], *grads) / ctx.temperature
            if grad_hidden is not None:
                grad_hidden[start:end] = dz.to(weight.dtype) @ weight
            if grad_weight is not None:
                grad_weight += dz.t() @ part.to(dz.dtype)
            if grad_bias is not None:
                grad_bias += dz.sum(dim=0)
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        grad_bias = None if grad_bias is None or bias is None else grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def fused_linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    temperature: float,
    backend: str = "torch",
    chunk: int = CHUNK_TOKENS,
) -> torch.Tensor:
    """``[..., 3]`` float32: log-prob of ``labels`` ``[...]``, entropy and ``Σπ²`` of
    ``softmax((hidden·Wᵀ + b) / temperature)`` for hidden states ``hidden`` ``[..., H]``, differentiable,
    without materialising the ``[..., V]`` logits (:class:`FusedLinearLogProbs`)."""
    if labels.shape != hidden.shape[:-1]:
        raise ValueError(f"labels {tuple(labels.shape)} do not match hidden states {tuple(hidden.shape)}")
    flat = hidden.reshape(-1, hidden.shape[-1])
    results = FusedLinearLogProbs.apply(
        flat, weight, bias, labels.reshape(-1).long(), float(temperature), chunk, backend
    )
    return torch.stack(results, dim=-1).reshape(*hidden.shape[:-1], FUSED_OUTPUTS)


def _output_head(model: nn.Module) -> nn.Linear:
    """The LM head of ``model`` (looking through a DeepSpeed engine's ``.module``); an error when it is
    not a plain linear projection or the model rescales its logits after it."""
    base: Any = getattr(model, "module", model)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear):
        raise RLCoreError(
            f"use_fused_kernels=true needs a model whose LM head is a linear layer; {type(base).__name__} has "
            f"{type(head).__name__}: set actor_rollout_ref.model.use_fused_kernels=false"
        )
    text_config = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    for name in _LOGIT_TRANSFORMS:
        value = getattr(text_config, name, None)
        if value not in (None, 1, 1.0):
            raise RLCoreError(
                f"use_fused_kernels=true cannot apply the {name}={value!r} of {type(base).__name__}'s logits: "
                "set actor_rollout_ref.model.use_fused_kernels=false"
            )
    return head


@contextmanager
def fused_head(model: nn.Module, labels: torch.Tensor, temperature: float, backend: str) -> Iterator[None]:
    """Within the block, ``model``'s LM head returns :func:`fused_linear_logprobs` ``[..., 3]`` of the hidden
    states it receives instead of logits; ``labels`` must have the shape of those hidden states without
    the last dimension (the positions the model projects, after ``logits_to_keep``)."""
    head = _output_head(model)

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        return fused_linear_logprobs(hidden, head.weight, head.bias, labels, temperature, backend)

    head.forward = forward  # type: ignore[method-assign,assignment]  # patched for the block, restored below
    try:
        yield
    finally:
        del head.forward
