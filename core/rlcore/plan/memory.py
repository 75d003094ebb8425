"""Bytes per rank of each thing a phase holds: training state, activations, logits, the rollout's weights
and KV cache. Pure arithmetic over :class:`~rlcore.plan.model_size.ModelSize` and
:class:`~rlcore.plan.settings.TrainState` (docs/plan.md gives every formula and what it was checked against).

Activations follow what autograd saves in a Hugging Face Llama-family decoder layer (measured on CPU with
``torch.autograd.graph.saved_tensors_hooks``): per token and layer ``7·h + 3·heads·head_dim + 4·I`` elements in
the compute dtype plus ``heads + 2`` fp32 statistics (RMSNorm's inverse root, attention's log-sum-exp); a
padded micro-batch adds SDPA's ``[rows, 1, S, S]`` mask per layer. With gradient checkpointing only each
layer's input is kept, and one layer is recomputed at a time in the backward pass.
"""

from __future__ import annotations

from rlcore_plugin_hf.chunking import STEP_VOCAB_COPIES, ModelShape

from rlcore.plan.model_size import ModelSize
from rlcore.plan.settings import TrainState

#: bytes of an AdamW step counter (one fp32 scalar per parameter tensor, in host memory on CUDA)
STEP_COUNTER_BYTES = 4
#: fp32 bytes per vocabulary entry of one log-prob position: the logits and their log-softmax
LOGIT_BYTES = 4


def layer_elements_per_token(shape: ModelShape) -> int:
    """Activation elements one decoder layer saves per token for its backward pass (compute dtype)."""
    return 7 * shape.hidden + 3 * shape.heads * shape.head_dim + 4 * shape.intermediate


def layer_stat_bytes_per_token(shape: ModelShape) -> int:
    """fp32 statistics a layer saves per token: two RMSNorm inverse roots and a log-sum-exp per head."""
    return 4 * (shape.heads + 2)


def state_bytes(size: ModelSize, state: TrainState, *, trainable: bool, device_type: str) -> dict[str, int]:
    """Device bytes of an engine's parameters, gradients, optimizer state and gathered layers on one rank.

    Parameters: the rank's shard in the stored dtype; gradients likewise (trainable engines); AdamW's two
    moments (plus DeepSpeed's fp32 master copy) and, on CPU, one fp32 step counter per tensor (per flat
    group for DeepSpeed, per fused tensor for Megatron); FSDP's gathered layers (current + prefetched) in the compute dtype; DeepSpeed's
    reduction bucket during the backward pass. What lives in host memory counts 0.
    """
    params = 0 if state.params_on_host else size.shard_elements(state.shards) * state.weight_bytes
    grads = optim = 0
    if trainable:
        grads = 0 if state.params_on_host else size.shard_elements(state.grad_shards) * state.grad_bytes
        if not state.optim_on_host:
            tensors = 1 if state.flat_optimizer else size.param_tensors
            if state.fused_projections:  # per layer q/k/v (and their biases) as one tensor, gate/up as one
                tensors -= size.shape.layers * (3 + (2 if size.qkv_bias else 0))
            counters = tensors * STEP_COUNTER_BYTES if device_type == "cpu" else 0
            optim = size.shard_elements(state.optim_shards) * state.optim_bytes + counters
    gathered = state.gathered_layers * size.layer_params * state.compute_bytes
    bucket = state.bucket_bytes if trainable else 0
    return {"params": params, "grads": grads, "optimizer": optim, "gathered_layers": gathered, "reduce_bucket": bucket}


def training_activations(
    shape: ModelShape,
    *,
    rows: int,
    seq: int,
    tokens: int,
    logit_tokens: int,
    dtype_bytes: int,
    checkpointing: bool,
    packed: bool,
    offload: bool,
    ulysses: int,
) -> dict[str, int]:
    """Bytes of one micro-batch's forward and backward on one rank.

    ``tokens`` enter the layers (``rows × seq`` padded, fewer packed), ``logit_tokens`` are projected to the
    vocabulary (the response positions). Returns ``activations`` (what the layers save), ``attention_masks``
    (the padded path's SDPA masks), ``logits`` (the saved fp32 log-softmax and the hidden states under it),
    ``recompute`` (one layer recomputed in the backward pass with checkpointing) and ``logits_grad`` (the
    fp32 gradient of the logits in the backward pass).
    """
    local = -(-tokens // max(1, ulysses))
    per_layer = local * (layer_elements_per_token(shape) * dtype_bytes + layer_stat_bytes_per_token(shape))
    layer_inputs = local * shape.hidden * dtype_bytes
    kept_layers = 1 if offload else shape.layers
    saved = kept_layers * (layer_inputs if checkpointing else per_layer)
    masks = 0 if packed else shape.layers * rows * seq * seq * dtype_bytes
    if checkpointing:
        masks = masks // max(1, shape.layers)
    return {
        "activations": saved + 2 * layer_inputs,
        "attention_masks": masks,
        "logits": logit_tokens * (shape.vocab * LOGIT_BYTES + shape.hidden * dtype_bytes),
        "recompute": per_layer if checkpointing else 0,
        "logits_grad": logit_tokens * shape.vocab * LOGIT_BYTES,
    }


def inference_activations(
    shape: ModelShape, *, rows: int, seq: int, tokens: int, logit_tokens: int, dtype_bytes: int, packed: bool
) -> dict[str, int]:
    """Bytes of one micro-batch of a log-prob pass (no gradients): one layer's intermediate values at a
    time, its attention mask, and the fp32 logits with their log-softmax."""
    return {
        "layer_workspace": tokens * (layer_elements_per_token(shape) * dtype_bytes + layer_stat_bytes_per_token(shape)),
        "attention_masks": 0 if packed else rows * seq * seq * dtype_bytes,
        "logits": 2 * logit_tokens * shape.vocab * LOGIT_BYTES,
    }


def kv_cache_bytes(shape: ModelShape, rows: int, cache_len: int, dtype_bytes: int) -> int:
    """The HF engine's static KV cache: ``rows × cache_len × layers × 2 × kv_heads × head_dim × dtype``."""
    return rows * cache_len * shape.layers * 2 * shape.kv_heads * shape.head_dim * dtype_bytes


def fused_weight_bytes(size: ModelSize, dtype_bytes: int) -> int:
    """The HF engine's static decoder's concatenated copies per layer: the q/k/v projections (and their
    biases), the per-head q/k norms (Qwen3) and the gate/up projections."""
    shape = size.shape
    qkv_rows = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    per_layer = shape.hidden * qkv_rows + 2 * shape.hidden * shape.intermediate
    if size.qkv_bias:
        per_layer += qkv_rows
    if size.qk_norm:
        per_layer += (shape.heads + shape.kv_heads) * shape.head_dim
    return shape.layers * per_layer * dtype_bytes


def decode_step_bytes(shape: ModelShape, rows: int, dtype_bytes: int) -> int:
    """A decoding step's workspace for ``rows`` rows (what a CUDA graph's pool keeps, roughly): one layer's
    hidden, projection and MLP values, and the sampler's fp32 vocabulary vectors."""
    projections = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    per_row = (4 * shape.hidden + projections + 3 * shape.intermediate) * dtype_bytes
    return rows * (per_row + STEP_VOCAB_COPIES * 4 * shape.vocab)
