"""A lean functional forward for Llama-family causal LMs (Qwen2, Qwen3, Llama) with a static KV cache.

The HF engine's decoding loop spends most of a small model's time in Python around the model (module
calls, output dataclasses, cache objects, mask helpers), and on an accelerator a ``DynamicCache`` grows
every step, so no step can be replayed as a CUDA graph. :class:`StaticDecoder` computes the same function
directly with torch ops on the module's own parameters: RMSNorm, Qwen3's per-head q/k RMSNorm (over the
head dimension, before the rotary embedding), rotary embeddings from a precomputed table, grouped-query
``scaled_dot_product_attention`` against a preallocated cache, SwiGLU MLP; the q/k/v and gate/up
projections run as one matrix product each on concatenated copies of the weights (:class:`_LayerWeights`).

A decoding step (:meth:`StaticDecoder.decode`) has static shapes: it writes the new keys and values at a
cache slot given as a device tensor and attends over a prefix of the cache, the step's read-length
bucket (:func:`rlcore_plugin_hf.chunking.read_length`: one of 8 lengths covering the filled positions),
under a mask, so the same tensors are read and written at every step of a bucket and the step can be
captured once per bucket in a CUDA graph (:mod:`rlcore_plugin_hf.cuda_graphs`) and replayed; it reads
only the keys and values up to its bucket, not the whole cache (``bench/decode_kernels.py`` counts the
bytes). :meth:`StaticDecoder.load_weights` runs at the start
of every generate call: it refreshes the concatenated copies in place while the module's tensors are the
same ones (weights updated in place are served, graphs stay valid) and rebuilds them when a tensor was
replaced (:attr:`StaticDecoder.version` then changes, and graphs are captured again).

Only plain causal models with default rotary embeddings qualify (:func:`supports`); everything else keeps
the HF module path. ``tests/test_rollout_hf.py`` and ``tests/test_rollout_static.py`` check that both
paths give the same tokens and log-probs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, TypedDict, TypeGuard

import torch
import torch.nn.functional as F

__all__ = ["LlamaLikeLM", "StaticDecoder", "build", "supports"]

#: the ``model_type`` values whose forward :class:`StaticDecoder` reproduces
SUPPORTED_TYPES = ("qwen2", "qwen3", "llama")


class _Weighted(Protocol):
    """A norm or an embedding: the decoder reads its ``weight``."""

    weight: torch.Tensor


class _Linear(Protocol):
    """A projection (``nn.Linear``)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    out_features: int


class _Attention(Protocol):
    """A layer's ``self_attn`` (Qwen3's ``q_norm``/``k_norm`` are optional and read with ``getattr``)."""

    q_proj: _Linear
    k_proj: _Linear
    v_proj: _Linear
    o_proj: _Linear


class _MLP(Protocol):
    """A layer's SwiGLU ``mlp``."""

    gate_proj: _Linear
    up_proj: _Linear
    down_proj: _Linear


class _DecoderLayer(Protocol):
    """One decoder layer of ``model.layers``."""

    self_attn: _Attention
    mlp: _MLP
    input_layernorm: _Weighted
    post_attention_layernorm: _Weighted


class _Backbone(Protocol):
    """The causal LM's ``model``: embeddings, decoder layers and final norm."""

    embed_tokens: _Weighted
    layers: Iterable[_DecoderLayer]
    norm: _Weighted


class _Config(Protocol):
    """The config keys the decoder reads without a default."""

    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int
    rms_norm_eps: float


class LlamaLikeLM(Protocol):
    """What :class:`StaticDecoder` reads of a Qwen2/Qwen3/Llama causal LM (the Hugging Face attribute
    names); :func:`supports` tells whether a module is one."""

    config: _Config
    model: _Backbone
    lm_head: Callable[[torch.Tensor], torch.Tensor]

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """The module's parameters."""
        ...


def supports(module: torch.nn.Module) -> TypeGuard[LlamaLikeLM]:
    """Whether ``module`` is a plain Llama-family causal LM this decoder reproduces exactly."""
    config = getattr(module, "config", None)
    if config is None or getattr(config, "model_type", None) not in SUPPORTED_TYPES:
        return False
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return False
    if getattr(config, "use_sliding_window", False) or getattr(config, "hidden_act", "silu") != "silu":
        return False
    layer_types = getattr(config, "layer_types", None)
    if layer_types and any(kind != "full_attention" for kind in layer_types):
        return False
    return getattr(config, "pretraining_tp", 1) == 1 and not getattr(config, "mlp_bias", False)


class _Concatenated(TypedDict):
    """The tensors of a layer that :class:`_LayerWeights` holds as new, concatenated copies."""

    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None
    gate_up: torch.Tensor


@dataclass(frozen=True)
class _LayerWeights:
    """One decoder layer's weights for decoding: q/k/v and gate/up projections concatenated (one matrix
    product each), Qwen3's q/k norm weights stacked per head, the rest the module's own tensors."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    qk_norm: torch.Tensor | None
    out: torch.Tensor
    out_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor

    @staticmethod
    def _concatenated(layer: _DecoderLayer, heads: int, kv_heads: int) -> _Concatenated:
        """The concatenated tensors of ``layer`` (new tensors): ``qkv``, ``qkv_bias``, ``qk_norm``, ``gate_up``."""
        attn, mlp = layer.self_attn, layer.mlp
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        biases = [p.bias for p in projections]
        qkv_bias = None
        if any(b is not None for b in biases):
            qkv_bias = torch.cat(
                [p.weight.new_zeros(p.out_features) if b is None else b for p, b in zip(projections, biases)]
            )
        qk_norm = None
        q_norm: _Weighted | None = getattr(attn, "q_norm", None)
        k_norm: _Weighted | None = getattr(attn, "k_norm", None)
        if q_norm is not None and k_norm is not None:  # Qwen3: [heads + kv_heads, 1, head_dim]
            qk_norm = torch.cat([q_norm.weight.expand(heads, -1), k_norm.weight.expand(kv_heads, -1)])[:, None, :]
        return {
            "qkv": torch.cat([p.weight for p in projections]),
            "qkv_bias": qkv_bias,
            "qk_norm": qk_norm,
            "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
        }

    @classmethod
    def of(cls, layer: _DecoderLayer, heads: int, kv_heads: int) -> _LayerWeights:
        """The weights of ``layer`` (a Qwen2/Qwen3/Llama decoder layer) with ``heads`` query heads."""
        attn = layer.self_attn
        return cls(
            input_norm=layer.input_layernorm.weight,
            out=attn.o_proj.weight,
            out_bias=attn.o_proj.bias,
            post_norm=layer.post_attention_layernorm.weight,
            down=layer.mlp.down_proj.weight,
            **cls._concatenated(layer, heads, kv_heads),
        )

    def refresh(self, layer: _DecoderLayer, heads: int, kv_heads: int) -> None:
        """Copy ``layer``'s current values into the concatenated tensors (in place: their storage stays)."""
        fresh = self._concatenated(layer, heads, kv_heads)
        pairs = (
            (self.qkv, fresh["qkv"]),
            (self.qkv_bias, fresh["qkv_bias"]),
            (self.qk_norm, fresh["qk_norm"]),
            (self.gate_up, fresh["gate_up"]),
        )
        for mine, new in pairs:
            if mine is not None and new is not None:
                mine.copy_(new)


class StaticDecoder:
    """Prefill and one-token decode steps for ``module`` against a KV cache kept between calls.

    :meth:`reserve` sizes the cache (rows x positions), :meth:`load_weights` points the decoder at the
    module's weights, :meth:`prefill` runs left-padded prompts into the first rows of the cache and
    :meth:`decode` runs one token per row; :meth:`release` frees the cache and the weight copies.
    """

    def __init__(self, module: LlamaLikeLM) -> None:
        """Read the shapes and the submodules of ``module`` (one that :func:`supports` accepts)."""
        config = module.config
        self.module = module
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.eps = float(config.rms_norm_eps)
        rope = getattr(config, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
        self.inv_freq = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        model = module.model
        self.embed = model.embed_tokens
        self.layers = list(model.layers)
        self.norm = model.norm
        self.lm_head = module.lm_head
        #: changes whenever a tensor that :meth:`decode` reads is reallocated (graphs must be captured again)
        self.version = 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self._fused: list[_LayerWeights] = []
        self._weight_ids: tuple[int, ...] = ()
        self._tables = (torch.empty(0), torch.empty(0))
        self._rotation = torch.empty(0)
        self._slots = torch.empty(0)

    # -------------------------------------------------------------- memory
    @property
    def rows(self) -> int:
        """Rows the cache holds (0 when released)."""
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def length(self) -> int:
        """Positions the cache holds per row (0 when released)."""
        return self.keys[0].shape[2] if self.keys else 0

    def cache_bytes(self) -> int:
        """Bytes held by the KV cache."""
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def reserve(self, rows: int, length: int) -> None:
        """Make the cache hold at least ``rows`` rows of at least ``length`` positions: kept when large
        enough (so the tensors that CUDA graphs read stay the same), else allocated anew (zeroed) with
        ``rows`` x ``length``; the rotary tables cover the cache's positions."""
        if self.rows >= rows and self.length >= length:
            return
        weight = self.embed.weight
        self.keys, self.values = [], []  # free the old cache before allocating the new one
        shape = (rows, self.kv_heads, length, self.head_dim)
        self.keys = [torch.zeros(shape, device=weight.device, dtype=weight.dtype) for _ in self.layers]
        self.values = [torch.zeros(shape, device=weight.device, dtype=weight.dtype) for _ in self.layers]
        self._tabulate(length, weight.device, weight.dtype)
        self.version += 1

    def _tabulate(self, length: int, device: torch.device, dtype: torch.dtype) -> None:
        """The rotary cos/sin tables, the rotation and the slot indices for ``length`` positions (kept
        while they match: they survive :meth:`release`)."""
        cos = self._tables[0]
        if cos.shape[0] == length and cos.device == device and cos.dtype == dtype:
            return
        freqs = torch.arange(length, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self._tables = (emb.cos().to(device=device, dtype=dtype), emb.sin().to(device=device, dtype=dtype))
        # rotate_half as a signed permutation matrix: x @ R == cat(-x[half:], x[:half]) exactly (one
        # nonzero ±1 per column), in one op instead of four
        half = self.head_dim // 2
        rotation = torch.zeros(self.head_dim, self.head_dim, dtype=dtype, device=device)
        rotation[half:, :half] = -torch.eye(half, dtype=dtype, device=device)
        rotation[:half, half:] = torch.eye(half, dtype=dtype, device=device)
        self._rotation = rotation
        self._slots = torch.arange(length, device=device)

    def load_weights(self) -> None:
        """Point the decoder at the module's current weights: the concatenated copies are refreshed in
        place when the module still holds the same tensors, else rebuilt (and :attr:`version` changes)."""
        ids = tuple(p.data_ptr() for p in self.module.parameters())
        if self._fused and ids == self._weight_ids:
            for fused, layer in zip(self._fused, self.layers):
                fused.refresh(layer, self.heads, self.kv_heads)
            return
        self._fused = []
        self._fused = [_LayerWeights.of(layer, self.heads, self.kv_heads) for layer in self.layers]
        self._weight_ids = ids
        self.version += 1

    def release(self) -> None:
        """Free the KV cache and the weight copies (the next call reserves and loads them again)."""
        self.keys, self.values, self._fused, self._weight_ids = [], [], [], ()
        self.version += 1

    # -------------------------------------------------------------- pieces
    def _rms(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        """RMSNorm of ``x`` over its last dimension (computed in float32), scaled by ``weight``."""
        if x.dtype == torch.float32 and (weight is None or weight.dtype == torch.float32):
            if weight is None or weight.dim() == 1:
                return F.rms_norm(x, (x.shape[-1],), weight, self.eps)
            return F.rms_norm(x, (x.shape[-1],), None, self.eps) * weight
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return h if weight is None else weight * h

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention of ``q [B, H, T, D]`` over ``keys``/``values [B, KV, L, D]`` under the
        boolean ``mask [B, 1, T, L]``: the query heads of a group are stacked along the query axis, so
        no key or value is copied per group. Returns ``[B, T, H·D]``, the output projection's input."""
        batch, heads, length, dim = q.shape
        groups = heads // self.kv_heads
        if length == 1:  # one query per row: [B, KV, groups, D] attends with the mask broadcast
            out = F.scaled_dot_product_attention(
                q.view(batch, self.kv_heads, groups, dim), keys, values, attn_mask=mask
            )
            return out.reshape(batch, 1, heads * dim)  # a copy where the kernel's output is not contiguous
        if groups > 1:
            q = q.reshape(batch, self.kv_heads, groups * length, dim)
            mask = mask.repeat(1, 1, groups, 1)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return out.reshape(batch, heads, length, dim).transpose(1, 2).reshape(batch, length, heads * dim)

    def _forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        write: slice | torch.Tensor,
        read: int,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden states ``[B, T, C]`` of ``ids [B, T]`` at ``positions [B, T]`` for the first ``B`` rows of the
        cache: keys and values are written at the cache positions ``write`` (a slice, or a one-element
        index tensor for ``T = 1``) and the first ``read`` positions are attended under the boolean ``mask
        [B, 1, T, read]``."""
        batch, length = ids.shape
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        x = self.embed.weight[ids]
        cos, sin = self._tables[0][positions][:, None], self._tables[1][positions][:, None]
        for index, weights in enumerate(self._fused):
            h = self._rms(x, weights.input_norm)
            # one projection for q, k and v; q and k normed (Qwen3) and rotated together
            qkv = F.linear(h, weights.qkv, weights.qkv_bias).view(batch, length, heads + 2 * kv_heads, dim)
            qkv = qkv.transpose(1, 2)
            qk = qkv[:, : heads + kv_heads]
            if weights.qk_norm is not None:
                qk = self._rms(qk, weights.qk_norm)
            qk = qk * cos + (qk @ self._rotation) * sin
            keys, values = self.keys[index], self.values[index]
            if batch < keys.shape[0]:
                keys, values = keys[:batch], values[:batch]
            if isinstance(write, slice):
                keys[:, :, write] = qk[:, heads:]
                values[:, :, write] = qkv[:, heads + kv_heads :]
            else:
                keys.index_copy_(2, write, qk[:, heads:])
                values.index_copy_(2, write, qkv[:, heads + kv_heads :])
            out = self._attend(qk[:, :heads], keys[:, :, :read], values[:, :, :read], mask)
            x = x + F.linear(out, weights.out, weights.out_bias)
            h = self._rms(x, weights.post_norm)
            gate, up = F.linear(h, weights.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, weights.down)
        return x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """The output head's logits ``[B, V]`` for the last hidden states ``x [B, 1, C]`` (after the final
        norm); the head is called as a module, so forward hooks on it see ``[B, 1, V]`` as with HF."""
        return self.lm_head(self._rms(x, self.norm.weight))[:, -1]

    # -------------------------------------------------------------- API
    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Run the left-padded prompts ``ids [B, P]`` into the first ``B`` rows and ``P`` positions of the
        cache (after :meth:`reserve` and :meth:`load_weights`); returns the last logits ``[B, V]``."""
        length = ids.shape[1]
        device = ids.device
        valid = attention_mask.bool()
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        # a padding query attends to itself only (no fully masked row: sdpa would return NaN there)
        mask = (causal[None] & valid[:, None, :]) | torch.eye(length, dtype=torch.bool, device=device)[None]
        hidden = self._forward(ids, positions, slice(0, length), length, mask[:, None])
        return self._logits(hidden[:, -1:])

    @torch.no_grad()
    def decode(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        slot: torch.Tensor | int,
        key_mask: torch.Tensor,
        read: int | None = None,
    ) -> torch.Tensor:
        """One step for the first ``B`` rows: ``tokens [B]`` at ``positions [B]``, written at cache position
        ``slot``; each row attends to the cache positions up to ``slot`` where ``key_mask [B, L]`` is true.
        Returns the logits ``[B, V]``.

        With ``slot`` an int64 tensor of one element on the device, the step has static shapes and reads
        no host value (a CUDA graph can replay it): it attends over the first ``read`` cache positions (a
        read-length bucket at least ``slot + 1``; None: the whole cache), masking the positions after
        ``slot``. With ``slot`` a host int (eager decoding) only the filled positions are attended.
        """
        if isinstance(slot, int):
            mask, width, write = key_mask[:, None, None, : slot + 1], slot + 1, slice(slot, slot + 1)
            hidden = self._forward(tokens[:, None], positions[:, None], write, width, mask)
        else:
            width = self.length if read is None else read
            mask = (key_mask[:, :width] & (self._slots[:width] <= slot))[:, None, None, :]
            hidden = self._forward(tokens[:, None], positions[:, None], slot, width, mask)
        return self._logits(hidden)


def build(module: torch.nn.Module) -> StaticDecoder | None:
    """A :class:`StaticDecoder` for ``module``, or None when it is not supported."""
    return StaticDecoder(module) if supports(module) else None
