"""Rollout tracing (``actor_rollout_ref.rollout.trace``): what a trace is and what a trace backend implements.

With ``trace.backend`` set, rlcore-plugin-agents' runner records one :class:`TrajectoryTrace` per traced
trajectory: a root span for the agent loop and a child span for every engine turn (``generate``), tool call
(``tool:<name>``) and interaction reply, each recorded by :func:`traced` inside :func:`recording`. The spans are
handed to a :class:`TraceBackend` when the rollout ends; :func:`with_text` adds the decoded text of the ids
(``trace.token2text``). Backends: ``mlflow`` (the ``mlflow`` tracker plugin's tracker names its backend in
``trace_backend``) and ``weave`` (rlcore-plugin-agents'). Without a trace every :func:`traced` call costs one
context-variable read.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from rlcore.errors import RLCoreError

__all__ = ["TRACE_KEY", "Span", "TraceBackend", "TraceSettings", "TrajectoryTrace", "recording", "traced", "with_text"]

#: the rollout-tracing section of the rollout config
TRACE_KEY = "actor_rollout_ref.rollout.trace"

T = TypeVar("T")


@dataclass(frozen=True)
class TraceSettings:
    """``actor_rollout_ref.rollout.trace`` (verl's keys): the ``backend`` (None: off), ``token2text``, at most
    ``max_samples_per_step_per_worker`` prompt groups traced per rollout (None: all), and the
    ``project_name``/``experiment_name`` the traces are filed under (default: ``trainer``'s)."""

    backend: str | None
    token2text: bool
    max_samples_per_step_per_worker: int | None
    project_name: str
    experiment_name: str

    @classmethod
    def from_config(cls, config: Any) -> TraceSettings:
        """Read and check the section; bad values raise :class:`RLCoreError` naming the key."""
        trace = config.actor_rollout_ref.rollout.get("trace") or {}
        trainer = config.get("trainer") or {}
        backend = trace.get("backend")
        if backend is not None and not isinstance(backend, str):
            raise RLCoreError(f"{TRACE_KEY}.backend must be null or a backend name, got {backend!r}")
        token2text = trace.get("token2text", False)
        if not isinstance(token2text, bool):
            raise RLCoreError(f"{TRACE_KEY}.token2text must be true or false, got {token2text!r}")
        limit = trace.get("max_samples_per_step_per_worker")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise RLCoreError(
                f"{TRACE_KEY}.max_samples_per_step_per_worker must be null or a non-negative integer, got {limit!r}"
            )
        return cls(
            backend=backend or None,
            token2text=token2text,
            max_samples_per_step_per_worker=limit,
            project_name=str(trace.get("project_name") or trainer.get("project_name") or "rlcore"),
            experiment_name=str(trace.get("experiment_name") or trainer.get("experiment_name") or "rollout"),
        )


@dataclass
class Span:
    """One recorded step: its ``name``, ``span_type`` (``AGENT``, ``LLM``, ``TOOL``), ``inputs``, ``outputs``,
    times in nanoseconds since the epoch, ``error`` (the exception's text when it raised) and ``children``."""

    name: str
    span_type: str
    inputs: dict[str, Any]
    start_ns: int
    end_ns: int = 0
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    children: list[Span] = field(default_factory=list)


class TrajectoryTrace:
    """The spans of one trajectory: a root span, its ``attributes`` (``rollout_call``, ``validate``,
    ``sample_index``, ``rollout_n``, ``agent_name``) and the children added with :meth:`span`."""

    def __init__(self, name: str, inputs: dict[str, Any], attributes: dict[str, Any]) -> None:
        self.root = Span(name, "AGENT", inputs, time.time_ns())
        self.attributes = attributes

    @contextlib.contextmanager
    def span(self, name: str, span_type: str, inputs: dict[str, Any]) -> Iterator[Span]:
        """Record a child span around the block; an exception is noted on the span and re-raised."""
        span = Span(name, span_type, inputs, time.time_ns())
        self.root.children.append(span)
        try:
            yield span
        except BaseException as exc:
            span.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            span.end_ns = time.time_ns()

    def end(self, outputs: dict[str, Any]) -> None:
        """Close the root span with the trajectory's ``outputs``."""
        self.root.outputs = outputs
        self.root.end_ns = time.time_ns()


_CURRENT: contextvars.ContextVar[TrajectoryTrace | None] = contextvars.ContextVar("rlcore_trace", default=None)


@contextlib.contextmanager
def recording(trace: TrajectoryTrace) -> Iterator[TrajectoryTrace]:
    """Within the block (in this task and the tasks it starts), :func:`traced` records into ``trace``."""
    token = _CURRENT.set(trace)
    try:
        yield trace
    finally:
        _CURRENT.reset(token)


async def traced(
    name: str, span_type: str, inputs: dict[str, Any], work: Awaitable[T], outputs: Callable[[T], dict[str, Any]]
) -> T:
    """Await ``work``; inside a traced trajectory, as a child span with ``inputs`` and ``outputs(result)``."""
    trace = _CURRENT.get()
    if trace is None:
        return await work
    with trace.span(name, span_type, inputs) as span:
        result = await work
        span.outputs = outputs(result)
    return result


class TraceBackend(Protocol):
    """Where finished traces go (``trace.backend``): built once per run from the resolved config."""

    def __init__(self, config: Any, settings: TraceSettings) -> None:
        """Connect to the backend (errors name the key and what to install)."""
        ...

    def export(self, traces: Sequence[TrajectoryTrace], decode: Callable[[Sequence[int]], str] | None) -> None:
        """Send ``traces``; with ``decode`` (``token2text``) add ``*_text`` next to each ``*_ids`` value."""
        ...


def with_text(values: Mapping[str, Any], decode: Callable[[Sequence[int]], str] | None) -> dict[str, Any]:
    """``values`` plus, when ``decode`` is given, ``<name>_text`` for every list-valued ``<name>_ids``."""
    out = dict(values)
    if decode is not None:
        for key, value in values.items():
            if key.endswith("_ids") and isinstance(value, list):
                out[key[: -len("_ids")] + "_text"] = decode(value)
    return out
