"""The batch filter ``{{ cookiecutter.hyphenated }}`` (``algorithm.batch_filters=[{{ cookiecutter.hyphenated }}]``).

What it does: keeps the groups (responses to the same prompt, same ``uid``) whose rewards are not all
equal. A group where every response scored the same gives zero group-relative advantages, so it costs a
training pass and teaches nothing (DAPO's dynamic sampling). When the filter leaves fewer prompts than
``data.train_batch_size``, the controller may generate more (``algorithm.max_num_gen_batches``).

What to change: the ``keep`` rule in :func:`keep_varied_groups`. Return a subset of the rows you were
given (``batch[mask]``) with the same keys, and metrics as numbers. ``tests/test_batch_filter.py`` runs
rlcore's contract suite on it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def keep_varied_groups(batch: Any, config: Any) -> tuple[Any, dict[str, float]]:
    """The rows of ``batch`` whose group has at least two different sequence rewards, and the kept counts."""
    key = "token_level_rewards" if "token_level_rewards" in batch else "token_level_scores"
    rewards = batch[key].sum(dim=-1).float().cpu().numpy()
    uids = np.asarray(batch["uid"])
    varied = {uid for uid in dict.fromkeys(uids) if np.ptp(rewards[uids == uid]) > 0}
    keep = np.array([uid in varied for uid in uids], dtype=bool)
    groups = len(set(uids))
    metrics = {
        "{{ cookiecutter.hyphenated }}/kept_groups": float(len(varied)),
        "{{ cookiecutter.hyphenated }}/kept_group_fraction": len(varied) / groups if groups else 0.0,
    }
    return batch[keep], metrics
