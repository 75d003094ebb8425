"""Model FLOPs of the training stages, counted from the model's config, and the MFU metrics of a step.

A pass over a batch of sequences of lengths ``s_i`` (``T = Σ s_i`` tokens) costs, per :class:`FlopsModel`:

- the matmuls: ``2·N`` FLOPs per token forward, ``6·N`` forward + backward, where ``N`` counts every weight
  that multiplies a token's activations once: per layer the attention projections
  ``H·(q + 2·kv) + q·H`` (``q = heads·head_dim``, ``kv = kv_heads·head_dim``) and the MLP ``3·H·I`` (gate, up,
  down) — for a mixture of experts the router ``H·E``, the ``top_k`` routed experts and any shared
  expert instead — plus the LM head ``V·H``. The embedding lookup multiplies nothing and is not counted;
- the attention scores and their weighted sum: ``4·q·Σ s_i²`` FLOPs per layer forward (``Q·Kᵀ`` and ``A·V``,
  causal masking not subtracted), 3× that forward + backward; a sliding-window layer counts
  ``s_i·min(s_i, window)``.

So a training pass (``update_actor``) costs ``6·N·T + 12·q·L·Σ s_i²`` per PPO epoch and a forward-only pass
(the old and reference log-probs) ``2·N·T + 4·q·L·Σ s_i²``. These are *model* FLOPs: activation
recomputation under gradient checkpointing is not counted, as in verl and Megatron-LM.

The MFU of a stage is ``FLOPs / (seconds · peak · world size)``, where ``seconds`` is the worker time of the
stage (``timing_worker_s/<method>``: the slowest rank) and ``peak`` one device's peak FLOPS
(:mod:`rlcore.tracking.device_peak`). Known model types: the Llama/Qwen families (``llama``, ``mistral``,
``qwen2``, ``qwen3``, and the text side of ``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``; a vision tower is not
counted) and the mixtures of experts ``qwen2_moe``, ``qwen3_moe`` and ``mixtral``. Any other type is counted
with the same formula from its config's sizes (and its expert fields, if any), with a one-time note.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["MFU_STAGES", "FlopsModel", "flops_model", "mfu_metrics"]

#: the model types whose layout the formula was checked against
KNOWN_MODEL_TYPES: frozenset[str] = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen2_moe", "qwen3_moe", "mixtral"}
)
#: ``perf/mfu/<stage>``: the worker method timed for it and whether it trains (forward + backward)
MFU_STAGES: dict[str, tuple[str, bool]] = {
    "actor": ("update_actor", True),
    "old_log_prob": ("compute_log_prob", False),
    "ref": ("compute_ref_log_prob", False),
}
_noted: set[str] = set()


@dataclass(frozen=True)
class FlopsModel:
    """What the FLOP count needs from a model: its matmul weights per token, attention width, window sizes."""

    #: the model's ``model_type``
    model_type: str
    #: ``N``: weights that multiply each token once (attention projections, MLP or active experts, LM head)
    matmul_params: int
    #: ``q = heads · head_dim``, the width of the attention scores' contraction
    attention_width: int
    #: per layer: the sliding window it attends over (None = the whole sequence)
    windows: tuple[int | None, ...]

    def attention_pairs(self, seqlens: Iterable[int]) -> int:
        """``Σ_layers Σ_i s_i · min(s_i, window)``: the query-key pairs of all layers."""
        lengths = [int(s) for s in seqlens]
        full = sum(s * s for s in lengths)
        return sum(full if w is None else sum(s * min(s, w) for s in lengths) for w in self.windows)

    def forward_flops(self, seqlens: Iterable[int]) -> float:
        """FLOPs of one forward pass over sequences of ``seqlens`` tokens: ``2·N·T + 4·q·pairs``."""
        lengths = [int(s) for s in seqlens]
        return 2.0 * self.matmul_params * sum(lengths) + 4.0 * self.attention_width * self.attention_pairs(lengths)

    def training_flops(self, seqlens: Iterable[int]) -> float:
        """FLOPs of a forward and backward pass (the backward costs twice the forward): 3× :meth:`forward_flops`."""
        return 3.0 * self.forward_flops(seqlens)


def _get(config: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` that ``config`` has and that is not None (else ``default``)."""
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return default


def _mlp_params(text: Any, hidden: int, layers: int) -> int:
    """The MLP weights a token meets in all layers: ``3·H·I`` per dense layer; per mixture-of-experts layer
    the router, the ``top_k`` routed experts and the shared expert(s)."""
    dense = 3 * hidden * int(text.intermediate_size)
    experts = _get(text, "num_experts", "num_local_experts", "n_routed_experts", default=0)
    top_k = _get(text, "num_experts_per_tok", default=0)
    if not experts or not top_k:
        return dense * layers
    expert_size = int(_get(text, "moe_intermediate_size", "intermediate_size"))
    moe = hidden * int(experts) + 3 * hidden * expert_size * int(top_k)
    shared = _get(text, "shared_expert_intermediate_size", default=0)
    if shared:  # qwen2_moe: one shared expert and its sigmoid gate
        moe += 3 * hidden * int(shared) + hidden
    moe += 3 * hidden * expert_size * int(_get(text, "n_shared_experts", default=0))
    step = int(_get(text, "decoder_sparse_step", default=1) or 1)
    dense_only = set(_get(text, "mlp_only_layers", default=()) or ())
    first_dense = int(_get(text, "first_k_dense_replace", default=0))
    sparse = [i not in dense_only and i >= first_dense and (i + 1) % step == 0 for i in range(layers)]
    return sum(moe if is_sparse else dense for is_sparse in sparse)


def _windows(text: Any, layers: int) -> tuple[int | None, ...]:
    """Each layer's attention window: ``sliding_window`` for the layers ``layer_types`` marks sliding."""
    window = _get(text, "sliding_window")
    kinds = list(_get(text, "layer_types", default=()) or ())
    return tuple(
        int(window) if window and i < len(kinds) and kinds[i] == "sliding_attention" else None for i in range(layers)
    )


def flops_model(config: Any) -> FlopsModel | None:
    """The :class:`FlopsModel` of a Hugging Face model config (a vision-language model's text side), or None
    when the config lacks the sizes the count needs (a note is logged once per model type)."""
    model_type = str(getattr(config, "model_type", "") or "unknown")
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    try:
        hidden = int(text.hidden_size)
        layers = int(text.num_hidden_layers)
        heads = int(text.num_attention_heads)
        vocab = int(_get(text, "vocab_size", default=0) or _get(config, "vocab_size"))
        kv_heads = int(_get(text, "num_key_value_heads", default=heads))
        head_dim = int(_get(text, "head_dim", default=hidden // heads))
        mlp = _mlp_params(text, hidden, layers)
    except (AttributeError, TypeError, ValueError) as exc:
        _note_once(model_type, f"cannot count the FLOPs of model type {model_type!r} ({exc}): perf/mfu/* not logged")
        return None
    if model_type not in KNOWN_MODEL_TYPES:
        _note_once(
            model_type,
            f"model type {model_type!r} is counted with the generic transformer formula (attention projections, "
            "gated MLP or experts, LM head; docs/profiling.md): perf/mfu/* is approximate",
        )
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * (q + 2 * kv) + q * hidden
    return FlopsModel(
        model_type=model_type,
        matmul_params=attention * layers + mlp + vocab * hidden,
        attention_width=q,
        windows=_windows(text, layers),
    )


def _note_once(model_type: str, message: str) -> None:
    """Log ``message`` once per process for ``model_type``."""
    if model_type not in _noted:
        _noted.add(model_type)
        log.warning(message)


def mfu_metrics(
    model: FlopsModel,
    seqlens: Mapping[str, Iterable[int]],
    worker_s: Mapping[str, float],
    peak_flops: float,
    world_size: int,
    ppo_epochs: int = 1,
) -> dict[str, float]:
    """``perf/mfu/<stage>`` for each stage of :data:`MFU_STAGES` that ran in the step.

    ``seqlens`` maps a stage to the lengths (prompt + response tokens) of the sequences it processed,
    ``worker_s`` a worker method to its seconds in the step; the actor update counts ``ppo_epochs`` training
    passes. A stage without lengths or without time is left out.
    """
    metrics: dict[str, float] = {}
    for stage, (method, trains) in MFU_STAGES.items():
        seconds = worker_s.get(method, 0.0)
        if stage not in seqlens or seconds <= 0 or peak_flops <= 0:
            continue
        lengths = list(seqlens[stage])
        flops = ppo_epochs * model.training_flops(lengths) if trains else model.forward_flops(lengths)
        metrics[f"perf/mfu/{stage}"] = flops / (seconds * peak_flops * max(world_size, 1))
    return metrics
