"""A resumable prompt loader: seeded per-epoch permutations, batches of collated rows, exact resume."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import torch

from rlcore.data import DataError
from rlcore.data.collate import collate_rows

logger = logging.getLogger(__name__)


class PromptLoader:
    """Iterate over a dataset in batches, epoch after epoch, with a state that resumes exactly.

    Epoch ``e`` visits the rows in ``torch.randperm(len(dataset), generator=manual_seed(seed + e))``
    order (or in file order without ``shuffle``); batch ``k`` of the epoch is the permutation's slice
    ``[k * batch_size, (k + 1) * batch_size)``. The state is ``(epoch, position)`` where ``position`` is the
    number of batches of that epoch already handed out, so after :meth:`load_state_dict` the next batch
    is exactly the one an uninterrupted run would have produced.

    Two ways to consume it:

    - ``next_batch()`` returns the next batch, moving on to the next epoch when the current one is used up
      (the controller's step loop);
    - ``for batch in loader`` yields the rest of the current epoch (all of the next one when the current
      epoch is finished).

    Args:
        dataset: anything with ``__len__`` and ``__getitem__`` returning a row dict.
        batch_size: rows per batch.
        shuffle: permute the rows each epoch.
        seed: base seed of the permutations.
        drop_last: drop the last incomplete batch of an epoch (default); otherwise yield it.
        split: the split name used in messages (default: ``dataset.split`` or ``"train"``).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int,
        drop_last: bool = True,
        split: str | None = None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.split = split or getattr(dataset, "split", "train")
        self.num_rows = len(dataset)
        if self.batch_size <= 0:
            raise DataError(f"{self.split} loader: batch size must be positive, got {self.batch_size}")
        if self.num_rows == 0 or (self.drop_last and self.num_rows < self.batch_size):
            raise DataError(
                f"{self.split} data has {self.num_rows} rows, fewer than one batch of {self.batch_size}; "
                "lower the batch size or add data"
            )
        self._epoch = 0
        self._position = 0
        self._order: tuple[int, torch.Tensor] | None = None

    @property
    def epoch(self) -> int:
        """The epoch the last (or, before any batch, the next) batch belongs to."""
        return self._epoch

    @property
    def position(self) -> int:
        """Batches of the current epoch already handed out."""
        return self._position

    @property
    def batches_per_epoch(self) -> int:
        """Batches in one epoch."""
        if self.drop_last:
            return self.num_rows // self.batch_size
        return -(-self.num_rows // self.batch_size)

    def __len__(self) -> int:
        """Batches in one epoch."""
        return self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` from its first batch."""
        self._epoch = int(epoch)
        self._position = 0

    def order(self, epoch: int) -> torch.Tensor:
        """The row order of ``epoch`` (a LongTensor permutation of ``range(len(dataset))``)."""
        if self._order is not None and self._order[0] == epoch:
            return self._order[1]
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + epoch)
            perm = torch.randperm(self.num_rows, generator=generator)
        else:
            perm = torch.arange(self.num_rows)
        self._order = (epoch, perm)
        return perm

    def next_batch(self) -> Any:
        """The next batch (a :class:`rlcore.protocol.Batch`), crossing into the next epoch when needed."""
        if self._position >= self.batches_per_epoch:
            self.set_epoch(self._epoch + 1)
        start = self._position * self.batch_size
        indices = self.order(self._epoch)[start : start + self.batch_size].tolist()
        self._position += 1
        return collate_rows([self.dataset[i] for i in indices])

    def __iter__(self) -> Iterator[Any]:
        """Yield the rest of the current epoch (the whole next epoch when the current one is finished)."""
        if self._position >= self.batches_per_epoch:
            self.set_epoch(self._epoch + 1)
        while self._position < self.batches_per_epoch:
            yield self.next_batch()

    def state_dict(self) -> dict[str, int]:
        """``{epoch, position, seed}`` plus ``num_rows`` and ``batch_size`` for a consistency check."""
        return {
            "epoch": self._epoch,
            "position": self._position,
            "seed": self.seed,
            "num_rows": self.num_rows,
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from ``state``: the next batch is the one that followed when the state was saved.

        A different row count or batch size (the data or config changed) is allowed but logged, because
        the batches then differ from the interrupted run's.
        """
        for key in ("epoch", "position", "seed"):
            if key not in state:
                raise DataError(f"{self.split} loader state is missing key {key!r}: {state!r}")
        for key, current in (("num_rows", self.num_rows), ("batch_size", self.batch_size)):
            if key in state and int(state[key]) != current:
                logger.warning(
                    "%s loader: resuming with %s=%d but the checkpoint had %d; batches will differ from the "
                    "interrupted run",
                    self.split,
                    key,
                    current,
                    int(state[key]),
                )
        self.seed = int(state["seed"])
        self._epoch = int(state["epoch"])
        self._position = min(int(state["position"]), self.batches_per_epoch)
        self._order = None
