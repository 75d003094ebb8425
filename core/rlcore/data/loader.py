"""A resumable prompt loader: seeded per-epoch permutations, batches of collated rows, exact resume."""

from __future__ import annotations

import itertools
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

    With a custom ``sampler`` (``data.sampler``, :mod:`rlcore.data.sampler`) the rows come from the sampler's
    iterator instead, drawn batch by batch when a batch is asked for (a curriculum sampler updated after a
    step shapes the next batch); an epoch is ``len(sampler)`` rows, and the rest of the iterator is drained
    when the epoch ends. The state then adds the sampler's ``state_dict()`` when it has one; a sampler
    without one is resumed by replaying the epoch's iterator past the rows already handed out.

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
        sampler: a torch ``Sampler`` of row numbers that replaces the seeded permutations.
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
        sampler: Any = None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.split = split or getattr(dataset, "split", "train")
        self.sampler = sampler
        self.num_rows = len(sampler) if sampler is not None else len(dataset)
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
        self._rows: Iterator[int] | None = None  # the sampler's iterator over the current epoch
        self._replay = False  # resumed without a sampler state: skip the rows already handed out

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
        if self.sampler is not None and (self._rows is not None or self._position > 0):
            # let the sampler finish its epoch, as a DataLoader with drop_last does (resumed at the epoch's
            # end, the iterator is a new one over what is left)
            for _ in self._rows if self._rows is not None else iter(self.sampler):
                pass
        self._rows = None
        self._epoch = int(epoch)
        self._position = 0
        self._replay = False
        if self.sampler is not None and hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self._epoch)

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
        """The next batch (a :class:`rlcore.api.batch.Batch`), crossing into the next epoch when needed."""
        if self._position >= self.batches_per_epoch:
            self.set_epoch(self._epoch + 1)
        start = self._position * self.batch_size
        if self.sampler is not None:
            indices = self._sampled(start)
        else:
            indices = self.order(self._epoch)[start : start + self.batch_size].tolist()
        self._position += 1
        return collate_rows([self.dataset[i] for i in indices])

    def _sampled(self, start: int) -> list[int]:
        """The next batch's row numbers from the sampler (``start`` rows of the epoch are handed out)."""
        if self._rows is None:
            self._rows = iter(self.sampler)
            if self._replay:
                for _ in itertools.islice(self._rows, start):
                    pass
                self._replay = False
        indices = [int(i) for i in itertools.islice(self._rows, self.batch_size)]
        if len(indices) < self.batch_size and (self.drop_last or not indices):
            raise DataError(
                f"{self.split} sampler {type(self.sampler).__name__} yielded {start + len(indices)} rows in epoch "
                f"{self._epoch}, fewer than its len() of {self.num_rows}"
            )
        return indices

    def __iter__(self) -> Iterator[Any]:
        """Yield the rest of the current epoch (the whole next epoch when the current one is finished)."""
        if self._position >= self.batches_per_epoch:
            self.set_epoch(self._epoch + 1)
        while self._position < self.batches_per_epoch:
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        """``{epoch, position, seed}`` plus ``num_rows`` and ``batch_size`` for a consistency check, and
        ``sampler`` (the custom sampler's ``state_dict()``) when it has one."""
        state: dict[str, Any] = {
            "epoch": self._epoch,
            "position": self._position,
            "seed": self.seed,
            "num_rows": self.num_rows,
            "batch_size": self.batch_size,
        }
        if self.sampler is not None and hasattr(self.sampler, "state_dict"):
            state["sampler"] = self.sampler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
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
        self._rows = None
        if self.sampler is None:
            return
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(self._epoch)
        if "sampler" in state and hasattr(self.sampler, "load_state_dict"):
            self.sampler.load_state_dict(state["sampler"])
        else:
            self._replay = True
