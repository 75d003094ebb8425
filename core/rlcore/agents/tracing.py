"""Rollout tracing (``actor_rollout_ref.rollout.trace``): each agent-loop trajectory as a tree of spans.

With ``trace.backend`` set, the runner records one trace per traced trajectory: a root span for the agent
loop (prompt and response ids, mask counts, turns, tool rewards and turn scores) and a child span for every
engine turn (``generate``), tool call (``tool:<name>``: arguments, response, reward, time) and interaction
reply. The spans are kept in memory while the rollout runs and handed to the backend in one go when it ends;
``trace.token2text`` adds the decoded ``prompt_text``/``response_text`` next to the ids at that point.

Backends: ``mlflow`` (from the ``mlflow`` tracker plugin, whose tracker class names its trace backend in
``trace_backend``) and ``weave`` (built in; needs ``pip install weave``). With ``backend: null`` no trace
object exists and every call site costs one context-variable read.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import importlib.util
import random
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rlcore.errors import RLCoreError

if TYPE_CHECKING:
    from rlcore.registry import Registry

__all__ = [
    "TRACE_KEY",
    "Span",
    "TraceBackend",
    "TraceSettings",
    "Tracer",
    "TrajectoryTrace",
    "WeaveTraceBackend",
    "check_trace_config",
    "load_trace_backend",
    "traced",
    "trajectory_outputs",
    "with_text",
]

TRACE_KEY = "actor_rollout_ref.rollout.trace"
#: how to get each backend verl knows when it is missing
BACKEND_HINTS = {
    "mlflow": "pip install rlcore-plugin-mlflow",
    "weave": "pip install weave",
}

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


class WeaveTraceBackend:
    """``trace.backend=weave``: every trace becomes a Weave call tree in project ``trace.project_name``."""

    def __init__(self, config: Any, settings: TraceSettings) -> None:
        try:
            import weave
        except ImportError as exc:
            raise RLCoreError(f"{TRACE_KEY}.backend=weave needs Weave: {BACKEND_HINTS['weave']}") from exc
        self.client = weave.init(settings.project_name)
        self.settings = settings

    def _call(
        self, span: Span, parent: Any, decode: Callable[[Sequence[int]], str] | None, attrs: dict[str, Any]
    ) -> None:
        inputs = with_text(span.inputs, decode)
        call = self.client.create_call(span.name, inputs, parent=parent, attributes=attrs, use_stack=False)
        for child in span.children:
            self._call(child, call, decode, {})
        self.client.finish_call(
            call, with_text(span.outputs, decode), exception=RuntimeError(span.error) if span.error else None
        )

    def export(self, traces: Sequence[TrajectoryTrace], decode: Callable[[Sequence[int]], str] | None) -> None:
        """Create each trajectory's calls (root, then children) with Weave's client API."""
        for trace in traces:
            attrs = {**trace.attributes, "experiment_name": self.settings.experiment_name}
            self._call(trace.root, None, decode, attrs)


def _tracker_backend(name: str, registry: Registry) -> Any:
    """The trace backend class a tracker plugin's tracker ``name`` (in ``registry``) names in its
    ``trace_backend`` attribute."""
    hint = BACKEND_HINTS.get(name)
    known = ", ".join(sorted(BACKEND_HINTS))
    if not registry.has("tracker", name):
        missing = f"install its plugin: {hint}" if hint else f"trace backends are {known}"
        raise RLCoreError(f"{TRACE_KEY}.backend={name}: no trace backend {name!r}; {missing}")
    target = getattr(registry.load("tracker", name), "trace_backend", None)
    if not target:
        raise RLCoreError(f"{TRACE_KEY}.backend={name}: the {name!r} tracker has no trace backend; use one of {known}")
    module, _, attr = str(target).partition(":")
    return getattr(importlib.import_module(module), attr)


def load_trace_backend(config: Any, settings: TraceSettings, registry: Registry) -> TraceBackend:
    """Build the backend ``settings.backend`` names, a tracker's resolved in ``registry`` (errors name the key
    and the pip command)."""
    name = str(settings.backend)
    cls = WeaveTraceBackend if name == "weave" else _tracker_backend(name, registry)
    backend: TraceBackend = cls(config, settings)
    return backend


def check_trace_config(config: Any, registry: Registry) -> None:
    """The dry run's check: the settings are valid and the backend's library can be imported (nothing is
    connected); a tracker's backend is resolved in ``registry``."""
    settings = TraceSettings.from_config(config)
    if settings.backend is None:
        return
    if settings.backend == "weave":
        if importlib.util.find_spec("weave") is None:
            raise RLCoreError(f"{TRACE_KEY}.backend=weave needs Weave: {BACKEND_HINTS['weave']}")
        return
    cls = _tracker_backend(settings.backend, registry)
    for library in getattr(cls, "requires", ()):
        if importlib.util.find_spec(library) is None:
            raise RLCoreError(f"{TRACE_KEY}.backend={settings.backend} needs {library}: pip install {library}")


def trajectory_outputs(trajectory: Any) -> dict[str, Any]:
    """The root span's outputs for a finished :class:`~rlcore.agents.trajectory.Trajectory`."""
    return {
        "response_ids": list(trajectory.response_ids),
        "policy_tokens": sum(trajectory.response_mask),
        "observation_tokens": len(trajectory.response_mask) - sum(trajectory.response_mask),
        "num_turns": trajectory.num_turns,
        "assistant_turns": trajectory.assistant_turns,
        "tool_rewards": trajectory.reward_scores.get("tool_rewards", 0.0),
        "turn_scores": list(trajectory.extra.get("turn_scores", [])),
        "metrics": dict(trajectory.metrics),
    }


class Tracer:
    """Traces the trajectories of each rollout (one per run, built by the runner when a backend is set).

    Args:
        config: the resolved run config.
        tokenizer: decodes ids for ``token2text``.
        backend: the backend (:meth:`from_config` builds the one ``trace.backend`` names).
    """

    def __init__(self, config: Any, tokenizer: Any, backend: TraceBackend) -> None:
        self.settings = TraceSettings.from_config(config)
        self.backend = backend
        self.tokenizer = tokenizer
        self.rng = random.Random(0)
        self.traces: list[TrajectoryTrace] = []

    @classmethod
    def from_config(cls, config: Any, tokenizer: Any, registry: Registry) -> Tracer | None:
        """A tracer when ``trace.backend`` is set (a tracker's backend resolved in ``registry``), else None
        (tracing off costs nothing)."""
        settings = TraceSettings.from_config(config)
        return cls(config, tokenizer, load_trace_backend(config, settings, registry)) if settings.backend else None

    def begin(
        self, batch: Any, samples: Sequence[Any], agent_names: Sequence[str], call: int
    ) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
        """Start the rollout of ``batch`` (its ``samples`` and their loops' ``agent_names``; ``call`` counts the
        runner's rollouts): pick at most ``max_samples_per_step_per_worker`` prompt groups (a ``uid`` and its
        repeats) at random and return, for each sample to trace, its root span's inputs and attributes."""
        self.traces = []
        groups = list(batch["uid"]) if "uid" in batch.non_tensors else list(range(len(samples)))
        limit = self.settings.max_samples_per_step_per_worker
        unique = list(dict.fromkeys(groups))
        chosen = set(unique if limit is None or limit >= len(unique) else self.rng.sample(unique, limit))
        seen: dict[Any, int] = {}
        selected = {}
        for i, (sample, group) in enumerate(zip(samples, groups)):
            rollout_n = seen[group] = seen.get(group, -1) + 1
            if group not in chosen:
                continue
            attributes = {
                "rollout_call": call,
                "validate": bool(batch.meta.get("validate", False)),
                "sample_index": sample.extra_info.get("index", unique.index(group)),
                "rollout_n": rollout_n,
                "agent_name": agent_names[i],
            }
            selected[i] = ({"prompt_ids": list(sample.prompt_ids)}, attributes)
        return selected

    @contextlib.contextmanager
    def trajectory(self, start: tuple[dict[str, Any], dict[str, Any]] | None) -> Iterator[TrajectoryTrace | None]:
        """Around one sample's agent loop: the trace its spans go to (None when :meth:`begin` did not pick it)."""
        if start is None:
            yield None
            return
        trace = TrajectoryTrace("agent_loop", *start)
        token = _CURRENT.set(trace)
        try:
            yield trace
        except BaseException as exc:
            trace.root.error = f"{type(exc).__name__}: {exc}"
            trace.end({})
            raise
        finally:
            _CURRENT.reset(token)
            self.traces.append(trace)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens kept, so the chat template's turns show)."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def export(self) -> int:
        """Send the rollout's traces to the backend; returns how many."""
        traces, self.traces = self.traces, []
        if traces:
            self.backend.export(traces, self.decode if self.settings.token2text else None)
        return len(traces)
