"""A lean functional forward for Llama-family causal LMs (Qwen2, Llama) with a preallocated KV cache.

The HF engine's decoding loop on CPU spends most of a small model's time in Python around the model
(module calls, output dataclasses, cache objects, mask helpers), and with an attention mask transformers
copies the key/value cache once per query-head group at every step instead of using grouped-query
attention. :class:`StaticDecoder` computes the same function directly with torch ops on the module's
own parameters (read at call time, so in-place weight updates are served at once): RMSNorm, rotary
embeddings from a precomputed table, grouped-query ``scaled_dot_product_attention`` against a static
cache, SwiGLU MLP; the q/k/v and gate/up projections run as one matrix product each on weights
concatenated at every prefill (:class:`_LayerWeights`). Only plain causal models with default rotary embeddings qualify (:func:`supports`);
everything else keeps the HF path. ``tests/test_rollout_hf.py`` checks that both paths give the same
tokens and log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["StaticDecoder", "build", "supports"]

#: the ``model_type`` values whose forward :class:`StaticDecoder` reproduces
SUPPORTED_TYPES = ("qwen2", "llama")


def supports(module: torch.nn.Module) -> bool:
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


@dataclass(frozen=True)
class _LayerWeights:
    """One decoder layer's weights for decoding: q/k/v and gate/up projections concatenated (one matrix
    product each), the rest the module's own tensors. Built at every prefill, so weights updated between
    generate calls are always served; released with the KV cache."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    out: torch.Tensor
    out_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor

    @classmethod
    def of(cls, layer: torch.nn.Module) -> _LayerWeights:
        """The weights of ``layer`` (a Qwen2/Llama decoder layer)."""
        attn, mlp = layer.self_attn, layer.mlp
        projections = (attn.q_proj, attn.k_proj, attn.v_proj)
        biases = [p.bias for p in projections]
        qkv_bias = None
        if any(b is not None for b in biases):
            qkv_bias = torch.cat(
                [p.weight.new_zeros(p.out_features) if b is None else b for p, b in zip(projections, biases)]
            )
        return cls(
            input_norm=layer.input_layernorm.weight,
            qkv=torch.cat([p.weight for p in projections]),
            qkv_bias=qkv_bias,
            out=attn.o_proj.weight,
            out_bias=attn.o_proj.bias,
            post_norm=layer.post_attention_layernorm.weight,
            gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
            down=mlp.down_proj.weight,
        )


class StaticDecoder:
    """Prefill + one-token decode steps for ``module`` with a static KV cache of ``max_len`` positions."""

    def __init__(self, module: torch.nn.Module) -> None:
        config = module.config
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
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
        self._tables: tuple[torch.Tensor, torch.Tensor] | None = None
        self._rotation = torch.empty(0)
        self._fused: list[_LayerWeights] = []

    # -------------------------------------------------------------- pieces
    def _rms(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """RMSNorm of ``x`` (computed in float32) scaled by ``weight``: one fused op for float32."""
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(x, weight.shape, weight, self.eps)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * h.to(x.dtype)

    def _rope_tables(self, max_pos: int, device: torch.device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary cos/sin tables for positions ``0 … max_pos-1`` (cached; rebuilt when too short)."""
        if self._tables is None or self._tables[0].shape[0] < max_pos or self._tables[0].dtype != dtype:
            freqs = torch.arange(max_pos, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            self._tables = (emb.cos().to(device=device, dtype=dtype), emb.sin().to(device=device, dtype=dtype))
            # rotate_half as a signed permutation matrix: x @ R == cat(-x[half:], x[:half]) exactly (one
            # nonzero ±1 per column), in one op instead of four
            half = self.head_dim // 2
            rotation = torch.zeros(self.head_dim, self.head_dim, dtype=dtype, device=device)
            rotation[half:, :half] = -torch.eye(half, dtype=dtype, device=device)
            rotation[:half, half:] = torch.eye(half, dtype=dtype, device=device)
            self._rotation = rotation
        return self._tables

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``x`` rotated by the rotary embedding (``x·cos + rotate_half(x)·sin``)."""
        return x * cos + (x @ self._rotation) * sin

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int, mask: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[B, T, C]`` of ``ids [B, T]`` written at cache slots ``start … start+T-1``;
        ``mask`` is the boolean ``[B, 1, T, start+T]`` attention mask."""
        batch, length = ids.shape
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        x = self.embed.weight[ids]
        cos_table, sin_table = self._tables
        cos, sin = cos_table[positions][:, None], sin_table[positions][:, None]
        end = start + length
        for index, weights in enumerate(self._fused):
            h = self._rms(x, weights.input_norm)
            # one projection for q, k and v; q and k rotated together
            qkv = F.linear(h, weights.qkv, weights.qkv_bias).view(batch, length, heads + 2 * kv_heads, dim)
            qkv = qkv.transpose(1, 2)
            qk = self._rotate(qkv[:, : heads + kv_heads], cos, sin)
            self.keys[index][:, :, start:end] = qk[:, heads:]
            self.values[index][:, :, start:end] = qkv[:, heads + kv_heads :]
            out = F.scaled_dot_product_attention(
                qk[:, :heads],
                self.keys[index][:, :, :end],
                self.values[index][:, :, :end],
                attn_mask=mask,
                enable_gqa=heads != kv_heads,
            )
            x = x + F.linear(out.transpose(1, 2).reshape(batch, length, heads * dim), weights.out, weights.out_bias)
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
    def prefill(
        self, ids: torch.Tensor, attention_mask: torch.Tensor, positions: torch.Tensor, max_len: int
    ) -> torch.Tensor:
        """Allocate the cache for ``max_len`` positions, run the (left-padded) prompts; last logits ``[B, V]``."""
        batch, length = ids.shape
        device, dtype = ids.device, self.embed.weight.dtype
        self._rope_tables(int(positions.max()) + max_len + 1, device, dtype)
        shape = (batch, self.kv_heads, max_len, self.head_dim)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in self.layers]
        self._fused = [_LayerWeights.of(layer) for layer in self.layers]
        valid = attention_mask.bool()
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        # a padding query attends to itself only (no fully masked row: sdpa would return NaN there)
        mask = (causal[None] & valid[:, None, :]) | torch.eye(length, dtype=torch.bool, device=device)[None]
        hidden = self._forward(ids, positions, 0, mask[:, None])
        return self._logits(hidden[:, -1:])

    def release(self) -> None:
        """Free the KV cache and the fused weights (the next :meth:`prefill` builds new ones)."""
        self.keys, self.values, self._fused = [], [], []

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, slot: int, key_mask: torch.Tensor) -> torch.Tensor:
        """One step: ``tokens [B]`` at ``positions [B]`` into cache ``slot``; ``key_mask [B, slot+1]``."""
        hidden = self._forward(tokens[:, None], positions[:, None], slot, key_mask[:, None, None, :])
        return self._logits(hidden[:, -1:])


def build(module: torch.nn.Module) -> StaticDecoder | None:
    """A :class:`StaticDecoder` for ``module``, or None when it is not supported."""
    return StaticDecoder(module) if supports(module) else None
