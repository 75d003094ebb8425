"""Rollout engines that trace their own generation (a discrete rollout stage of ``global_profiler.tool=torch``).

While a profiled rank runs ``generate_sequences`` with ``actor_rollout_ref.rollout.profiler.tool_config.torch
.discrete=true``, the worker's profiler posts a :class:`RolloutTraceRequest` (:func:`requesting`); the engine
claims it (:func:`claim`, which an engine reaches through ``rlcore.api.claim_rollout_trace``) and writes its
traces into the request's folder, the replica's own ``{save_path}/agent_loop_rollout_replica_{rank}/`` (verl's
layout). The hf engine traces itself with ``torch.profiler`` through :meth:`RolloutTraceRequest.engine_trace`;
the vllm plugin starts and stops vLLM's engine-side profiler and hands its files over with
:meth:`RolloutTraceRequest.adopt`.
``profile_token_start`` / ``profile_token_end`` bound the traced response tokens: the hf engine traces the
decoding iterations that produce tokens ``start .. end - 1`` of each chunk of rows, vLLM its engine iterations
(``delay_iterations`` / ``max_iterations``).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcore_plugin_profiler.torch_options import TorchOptions

__all__ = ["EngineTrace", "RolloutTraceRequest", "claim", "requesting", "unique_path"]


@dataclass
class RolloutTraceRequest:
    """A rollout trace the worker asks the engine for: the ``folder`` to write into, the profiled ``step``,
    the replica's ``rank``, the rollout's :class:`TorchOptions`, whether the rank is on CUDA; ``claimed`` once
    an engine takes it, ``written`` the files it wrote."""

    folder: Path
    step: int
    rank: int
    options: TorchOptions
    cuda: bool
    claimed: bool = False
    written: list[str] = field(default_factory=list)

    @property
    def token_start(self) -> int | None:
        """The first response token traced (None: from the first)."""
        return self.options.token_start

    @property
    def token_end(self) -> int | None:
        """The response token the trace stops before (None: to the end)."""
        return self.options.token_end

    def engine_trace(self) -> EngineTrace:
        """An :class:`EngineTrace` of this request (an in-process engine's own ``torch.profiler``)."""
        return EngineTrace(self)

    def adopt(self, path: Path) -> None:
        """Move a file the engine's own profiler wrote into the request's folder (under a name not taken yet)."""
        target = unique_path(self.folder, path.name, "")
        shutil.move(str(path), str(target))
        self.written.append(str(target))


_REQUEST: RolloutTraceRequest | None = None


@contextlib.contextmanager
def requesting(request: RolloutTraceRequest) -> Iterator[RolloutTraceRequest]:
    """Post ``request`` for the engines of this process during the block."""
    global _REQUEST
    _REQUEST = request
    try:
        yield request
    finally:
        _REQUEST = None


def claim() -> RolloutTraceRequest | None:
    """The posted request, now claimed by the calling engine (None when none is posted or it is taken)."""
    if _REQUEST is None or _REQUEST.claimed:
        return None
    _REQUEST.claimed = True
    _REQUEST.folder.mkdir(parents=True, exist_ok=True)
    return _REQUEST


def unique_path(folder: Path, stem: str, suffix: str) -> Path:
    """``folder/stem+suffix``, or ``folder/stem.<n>+suffix`` with the first ``n`` not yet taken."""
    path = folder / f"{stem}{suffix}"
    count = 1
    while path.exists():
        count += 1
        path = folder / f"{stem}.{count}{suffix}"
    return path


class EngineTrace:
    """An in-process engine's own ``torch.profiler`` trace of one ``generate`` call.

    Without a token window the whole call is traced (one file); with one, each chunk of rows is traced from
    its token ``profile_token_start`` to just before ``profile_token_end`` (one file per chunk). The engine
    calls :meth:`token` before producing each response token of a chunk (index 0: the prefill),
    :meth:`end_chunk` after the chunk and :meth:`close` at the end of the call.
    """

    def __init__(self, request: RolloutTraceRequest) -> None:
        self.request = request
        self.options = request.options
        self._profiler: Any = None
        self._chunk = 0
        if not self.options.token_window:
            self._start()

    def _start(self) -> None:
        import torch

        self._profiler = torch.profiler.profile(**self.options.profile_kwargs(self.request.cuda))
        self._profiler.__enter__()

    def _stop(self) -> None:
        if self._profiler is None:
            return
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
        stem = f"step{self.request.step}_rank{self.request.rank}"
        if self.options.token_window:
            stem += f"_chunk{self._chunk}"
        path = unique_path(self.request.folder, stem, ".trace.json")
        profiler.export_chrome_trace(str(path))
        self.request.written.append(str(path))

    def token(self, index: int) -> None:
        """About to produce response token ``index`` of the current chunk: open or close the window."""
        if not self.options.token_window:
            return
        start = self.options.token_start or 0
        end = self.options.token_end
        if index == start and self._profiler is None and (end is None or index < end):
            self._start()
        elif end is not None and index == end:
            self._stop()

    def end_chunk(self) -> None:
        """The chunk is done: a window still open ends here."""
        if self.options.token_window:
            self._stop()
            self._chunk += 1

    def close(self) -> None:
        """The call is done: write what is still open."""
        self._stop()
