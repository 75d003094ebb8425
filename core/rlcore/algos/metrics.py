"""Per-step data, timing and throughput metrics, under verl's metric names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

#: added to Var(returns) in ``critic/vf_explained_var``
EXPLAINED_VAR_EPS = 1e-5


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    """``{prefix}/mean``, ``/max`` and ``/min`` of a 1-D tensor (all 0.0 when it is empty)."""
    if values.numel() == 0:
        return {f"{prefix}/mean": 0.0, f"{prefix}/max": 0.0, f"{prefix}/min": 0.0}
    values = values.detach().float()
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _length_stats(prefix: str, lengths: torch.Tensor, max_length: int) -> dict[str, float]:
    """Mean/max/min of per-sample lengths plus ``clip_ratio``, the fraction at ``max_length``."""
    lengths = lengths.float()
    return {**_stats(prefix, lengths), f"{prefix}/clip_ratio": (lengths == max_length).float().mean().item()}


def compute_data_metrics(batch: Any, use_critic: bool) -> dict[str, float]:
    """Reward, advantage, return, value and length statistics of one training batch.

    ``batch`` is a :class:`rlcore.api.batch.Batch` (anything indexable by key) with ``prompts [B, P]``,
    ``responses [B, R]``, ``attention_mask [B, P+R]``, ``response_mask [B, R]``, ``token_level_scores``,
    ``token_level_rewards``, ``advantages``, ``returns`` and, with ``use_critic``, ``values``.
    ``critic/score`` and ``critic/rewards`` are statistics of per-sequence sums; advantages, returns and
    values are taken over response tokens; lengths come from the attention mask.
    """
    response_mask = batch["response_mask"].bool()
    prompt_width = batch["prompts"].shape[-1]
    response_width = batch["responses"].shape[-1]
    attention_mask = batch["attention_mask"]
    valid_returns = torch.masked_select(batch["returns"], response_mask).float()

    metrics = {
        **_stats("critic/score", batch["token_level_scores"].sum(dim=-1)),
        **_stats("critic/rewards", batch["token_level_rewards"].sum(dim=-1)),
        **_stats("critic/advantages", torch.masked_select(batch["advantages"], response_mask)),
        **_stats("critic/returns", valid_returns),
    }
    if use_critic:
        valid_values = torch.masked_select(batch["values"], response_mask).float()
        metrics.update(_stats("critic/values", valid_values))
        if valid_returns.numel() > 1:
            residual_var = torch.var(valid_returns - valid_values)
            returns_var = torch.var(valid_returns)
            metrics["critic/vf_explained_var"] = (1.0 - residual_var / (returns_var + EXPLAINED_VAR_EPS)).item()
        else:
            metrics["critic/vf_explained_var"] = 0.0
    metrics.update(_length_stats("response_length", attention_mask[:, prompt_width:].sum(dim=-1), response_width))
    metrics.update(_length_stats("prompt_length", attention_mask[:, :prompt_width].sum(dim=-1), prompt_width))
    return metrics


def compute_timing_metrics(
    timing: Mapping[str, float], n_prompt_tokens: int, n_response_tokens: int
) -> dict[str, float]:
    """``timing_s/<name>`` for every timed section and ``timing_per_token_ms/<name>`` per token.

    ``gen`` is divided by the number of response tokens, every other section by all (prompt + response)
    tokens; a section with no tokens to divide by gets no per-token entry.
    """
    metrics: dict[str, float] = {}
    total_tokens = n_prompt_tokens + n_response_tokens
    for name, seconds in timing.items():
        metrics[f"timing_s/{name}"] = float(seconds)
        tokens = n_response_tokens if name == "gen" else total_tokens
        if tokens > 0:
            metrics[f"timing_per_token_ms/{name}"] = float(seconds) * 1000.0 / tokens
    return metrics


def compute_throughput_metrics(total_tokens: int, step_time: float, n_devices: int) -> dict[str, float]:
    """``perf/total_num_tokens``, ``perf/time_per_step`` and ``perf/throughput`` (tokens/s per device)."""
    denominator = step_time * max(n_devices, 1)
    return {
        "perf/total_num_tokens": float(total_tokens),
        "perf/time_per_step": float(step_time),
        "perf/throughput": float(total_tokens) / denominator if denominator > 0 else 0.0,
    }


def compute_memory_metrics(peaks: Mapping[str, tuple[float, float]]) -> dict[str, float]:
    """Peak CUDA memory of the step's worker methods (``peaks``: ``{method: (GiB allocated, GiB reserved)}``):
    ``perf/max_memory_allocated_gb/<method>`` and ``perf/max_memory_reserved_gb/<method>``, and verl's
    ``perf/max_memory_allocated_gb`` and ``perf/max_memory_reserved_gb``, the largest over the methods."""
    if not peaks:
        return {}
    metrics: dict[str, float] = {}
    for method, (allocated, reserved) in peaks.items():
        metrics[f"perf/max_memory_allocated_gb/{method}"] = float(allocated)
        metrics[f"perf/max_memory_reserved_gb/{method}"] = float(reserved)
    metrics["perf/max_memory_allocated_gb"] = max(float(a) for a, _ in peaks.values())
    metrics["perf/max_memory_reserved_gb"] = max(float(r) for _, r in peaks.values())
    return metrics
