"""The weight transport ``{{ cookiecutter.hyphenated }}`` (``actor_rollout_ref.rollout.checkpoint_engine.backend={{ cookiecutter.hyphenated }}``).

What it does: hands the trainer's weights to the rollout engine one tensor per bucket, every tensor every sync,
as one weight update. rlcore checks after every sync that the engine serves the trainer's weights.

What to change: :meth:`TensorByTensor.send` (what goes into each bucket, what is left out: then set
``incremental = True`` and make :meth:`TensorByTensor.reset` forget what the engine holds). Read your arguments
from ``config.engine_kwargs["{{ cookiecutter.hyphenated }}"]``. ``tests/test_weight_transport.py`` loads
weights through it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

from rlcore.api import (
    CheckpointEngineConfig,
    TransportReport,
    WeightBucket,
    WeightReceiver,
)


class TensorByTensor:
    """Every tensor, each in a bucket of its own."""

    incremental: ClassVar[bool] = False

    def __init__(self, config: CheckpointEngineConfig) -> None:
        self.config = config

    def send(
        self,
        weights: Iterator[tuple[str, Any]],
        receiver: WeightReceiver,
        bucket_bytes: int | None,
    ) -> TransportReport:
        """Every ``(name, tensor)`` of ``weights`` to ``receiver``, one per bucket."""
        start = time.perf_counter()
        sent = count = 0

        def buckets() -> Iterator[WeightBucket]:
            nonlocal sent, count
            for name, tensor in weights:
                sent += tensor.numel() * tensor.element_size()
                count += 1
                yield WeightBucket([(name, tensor)])

        receiver.load(buckets(), full=True)
        return TransportReport(sent, sent, count, time.perf_counter() - start, True)

    def reset(self) -> None:
        """Nothing to forget: every send is a full one."""
