"""Samplers for tests and examples of ``data.sampler`` (:mod:`rlcore.data.sampler`).

:class:`RandomCurriculumSampler` stands in for the class verl's curriculum example script names
(``pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu``, ``RandomCurriculumSampler``): a seeded random
order per epoch that resumes mid-epoch from its ``state_dict``, and an ``update(batch)`` that records what
it was told.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import Any

import torch

from rlcore.api import AbstractCurriculumSampler

__all__ = ["RandomCurriculumSampler"]


class RandomCurriculumSampler(AbstractCurriculumSampler):
    """Epoch ``e`` visits the rows in ``randperm(n, seed + e)`` order (``seed`` is ``data.seed``, default 1).

    ``updates`` holds, per ``update(batch)`` call, the dataset ``index`` values of the batch's rows (or its
    size when it has none).
    """

    def __init__(self, data_source: Sized, data_config: Any) -> None:
        self.size = len(data_source)
        seed = data_config.get("seed", None) if hasattr(data_config, "get") else None
        self.seed = 1 if seed is None else int(seed)
        self.epoch = 0
        self.yielded = 0
        self.updates: list[list[Any]] = []

    def __len__(self) -> int:
        """Rows per epoch."""
        return self.size

    def __iter__(self) -> Iterator[int]:
        """The rest of the current epoch's order; the next epoch starts once it is exhausted."""
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        while self.yielded < self.size:
            row = order[self.yielded]
            self.yielded += 1
            yield row
        self.epoch += 1
        self.yielded = 0

    def update(self, batch: Any) -> None:
        """Record the finished step's rows."""
        rows = list(batch["index"]) if "index" in batch else [len(batch)]
        self.updates.append(rows)

    def state_dict(self) -> dict[str, Any]:
        """The epoch, the rows of it already handed out and the updates seen."""
        return {"epoch": self.epoch, "yielded": self.yielded, "updates": [list(u) for u in self.updates]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s ``state``."""
        self.epoch, self.yielded = int(state["epoch"]), int(state["yielded"])
        self.updates = [list(u) for u in state["updates"]]
