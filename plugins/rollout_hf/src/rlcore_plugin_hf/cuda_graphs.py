"""CUDA graphs of the HF engine's decoding step, one per batch-size and read-length bucket (as vLLM and SGLang
capture them).

A decoding step of the static decoder (:mod:`rlcore_plugin_hf.static_decoder`) plus its sampling
(:class:`rlcore_plugin_hf.decode_state.DecodeState`) launches a few hundred small kernels; on a GPU,
launching them from Python costs more than running them. :class:`StepGraphs` captures the step once per
key — the decode state (its bucket of rows, sampling and shapes), the step's read-length bucket (the
cache prefix it attends) and the decoder's
:attr:`~rlcore_plugin_hf.static_decoder.StaticDecoder.version` (its cache and weight tensors) — and
replays it afterwards: one launch per step. Every graph is captured into one shared memory pool: a
step keeps nothing of its own alive after it ends (it writes only into the decode state and the cache),
and steps replay one after another on one stream, so the graphs of all buckets reuse the same
scratch memory. Graphs are kept for the life of the engine while the tensors they read stay the same.
The first step of a key runs eagerly on a side stream (a real step, which also does the lazy
initialisation that capture forbids), then the step is captured
(recording does not run it) and every later step replays the graph. Graphs are dropped with
:meth:`StepGraphs.clear` (the engine's ``sleep()``, and whenever the decoder's version changes).

Should a capture fail (an op of this torch/CUDA build that cannot be captured), the error is logged as a
warning and every later step runs eagerly — the same function, so the same tokens; the engine's metric
``rollout/graph_step_share`` then reads 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any

import torch

__all__ = ["StepGraphs"]

log = logging.getLogger(__name__)


class StepGraphs:
    """Captured decoding steps by key, on the current CUDA device."""

    def __init__(self) -> None:
        self._graphs: dict[Hashable, Any] = {}
        self._version: Hashable = None
        self._pool: Any = None  # the memory pool every graph is captured into (made with the first)
        #: why capturing failed (steps then run eagerly), or None
        self.failure: str | None = None

    def __len__(self) -> int:
        """How many graphs are held."""
        return len(self._graphs)

    def run(self, key: Hashable, version: Hashable, step: Callable[[], None]) -> bool:
        """Run one ``step``: replay the graph of ``key``, or (the first time for ``key``) run it eagerly
        and capture it. A ``version`` other than the last one drops every graph first (the tensors they
        read were reallocated). Returns True when the step was replayed."""
        if self.failure is not None:
            step()
            return False
        if version != self._version:
            self.clear()
            self._version = version
        graph = self._graphs.get(key)
        if graph is not None:
            graph.replay()
            return True
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            step()
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                step()
        except RuntimeError as exc:  # the eager step above was a real one: nothing is lost
            self.failure = f"{type(exc).__name__}: {exc}"
            self.clear()
            log.warning("CUDA graph capture of the HF engine's decoding step failed; decoding eagerly: %s", exc)
            return False
        self._graphs[key] = graph
        return False

    def clear(self) -> None:
        """Drop every graph (their shared memory pool is freed with the last of them)."""
        self._graphs.clear()
        self._pool = None
