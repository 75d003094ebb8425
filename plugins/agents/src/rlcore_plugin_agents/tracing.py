"""Rollout tracing (``actor_rollout_ref.rollout.trace``): each agent-loop trajectory as a tree of spans.

With ``trace.backend`` set, the runner's :class:`Tracer` records one :class:`~rlcore.api.TrajectoryTrace` per
traced trajectory: a root span for the agent loop (prompt and response ids, mask counts, turns, tool rewards
and turn scores) and a child span for every engine turn (``generate``), tool call (``tool:<name>``: arguments,
response, reward, time) and interaction reply. The spans are kept in memory while the rollout runs and handed
to the backend in one go when it ends; ``trace.token2text`` adds the decoded ``prompt_text``/``response_text``
next to the ids at that point.

Backends: ``mlflow`` (from the ``mlflow`` tracker plugin, whose tracker class names its trace backend in
``trace_backend``) and ``weave`` (here; needs ``pip install weave``). With ``backend: null`` no tracer exists.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import random
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rlcore.api import (
    TRACE_KEY,
    RLCoreError,
    Span,
    TraceBackend,
    TraceSettings,
    TrajectoryTrace,
    recording,
    with_text,
)

if TYPE_CHECKING:
    from rlcore.api import Registry

__all__ = ["Tracer", "WeaveTraceBackend", "check_trace_config", "load_trace_backend", "trajectory_outputs"]

#: how to get each backend verl knows when it is missing
BACKEND_HINTS = {
    "mlflow": "pip install rlcore-plugin-mlflow",
    "weave": "pip install weave",
}


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
    """The root span's outputs for a finished :class:`~rlcore.api.Trajectory`."""
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
        try:
            with recording(trace):
                yield trace
        except BaseException as exc:
            trace.root.error = f"{type(exc).__name__}: {exc}"
            trace.end({})
            raise
        finally:
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
