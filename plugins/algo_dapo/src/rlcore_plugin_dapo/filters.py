"""DAPO's dynamic sampling as a batch filter: keep only the prompt groups that carry a learning signal."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlcore.api import Batch, RLCoreError


def group_metric(batch: Batch, metric: str) -> np.ndarray:
    """The per-response value of ``algorithm.filter_groups.metric`` as float64 ``[B]``.

    ``seq_reward`` and ``reward`` (verl's name since its PR #7792: the canonical reward before the in-reward KL
    penalty): the sum of ``token_level_scores``; ``seq_final_reward``: the sum of ``token_level_rewards`` (the
    scores when the batch has no rewards yet: rlcore's filters run before the in-reward KL penalty, so this is the
    pre-KL reward too); any other name (``acc``, ``score``, ...): the batch column of that name.
    """
    if metric in ("seq_reward", "reward") or (metric == "seq_final_reward" and "token_level_rewards" not in batch):
        return batch["token_level_scores"].sum(dim=-1).double().cpu().numpy()
    if metric == "seq_final_reward":
        return batch["token_level_rewards"].sum(dim=-1).double().cpu().numpy()
    if metric not in batch:
        raise RLCoreError(
            f"algorithm.filter_groups.metric={metric!r}: the batch has no per-sample {metric!r} values "
            f"(its keys: {', '.join(sorted(batch.keys()))}); use seq_reward or seq_final_reward"
        )
    column = batch[metric]
    values = column.double().cpu().numpy() if hasattr(column, "double") else np.asarray(column)
    try:
        return values.astype(np.float64).reshape(len(batch))
    except (TypeError, ValueError) as exc:
        raise RLCoreError(f"algorithm.filter_groups.metric={metric!r}: its values are not numbers ({exc})") from exc


def keep_varied_groups(batch: Batch, config: Any) -> tuple[Batch, dict[str, float]]:
    """Keep the prompt groups (samples sharing a ``uid``) whose metric is not constant, and singletons.

    A group whose responses all have the same ``algorithm.filter_groups.metric`` (all correct, all wrong)
    gets zero group-relative advantages and only dilutes the batch; the controller generates more rounds
    until ``data.train_batch_size`` groups survive. "Not constant" is max > min, verl's std > 0 without
    its floating-point noise. Metrics: ``batch_filter/dapo/kept_groups`` and ``batch_filter/dapo/total_groups``
    of this generation round.
    """
    metric = config.algorithm.filter_groups.metric
    values = group_metric(batch, metric)
    rows: dict[Any, list[int]] = {}
    for row, uid in enumerate(batch["uid"]):
        rows.setdefault(uid, []).append(row)
    kept = {uid for uid, members in rows.items() if len(members) == 1 or np.ptp(values[members]) > 0}
    keep = np.fromiter((uid in kept for uid in batch["uid"]), dtype=bool, count=len(batch))
    metrics = {"batch_filter/dapo/kept_groups": float(len(kept)), "batch_filter/dapo/total_groups": float(len(rows))}
    return batch[keep], metrics
