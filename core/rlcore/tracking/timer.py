"""Wall-clock time per stage of a training step (``timing_s/gen``, ``timing_s/update_actor``, ...)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class StageTimer:
    """Accumulates wall time per stage name; :meth:`pop_all` returns the step's times and resets.

    ::

        timer = StageTimer()
        with timer("gen"):
            ...
        metrics.update({f"timing_s/{k}": v for k, v in timer.pop_all().items()})

    Entering the same stage twice in a step adds up the times; a stage that raises still counts.
    """

    def __init__(self) -> None:
        """Start with no recorded stage."""
        self._seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        """Time the ``with`` block and add it to stage ``name``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[name] = self._seconds.get(name, 0.0) + time.perf_counter() - start

    def pop_all(self) -> dict[str, float]:
        """Return ``{stage: seconds}`` accumulated since the last call, and reset."""
        seconds, self._seconds = self._seconds, {}
        return seconds
