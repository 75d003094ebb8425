"""``actor_rollout_ref.rollout.trace.backend=mlflow``: agent-loop trajectories as MLflow traces.

Each traced trajectory becomes one MLflow trace in the experiment of the ``mlflow`` tracker: a root span
``agent_loop`` (type ``AGENT``) with a child span per engine turn (``LLM``), tool call (``TOOL``) and
interaction reply; the trajectory's attributes (``rollout_call``, ``validate``, ``sample_index``,
``rollout_n``, ``agent_name``, ``experiment_name``) are the root span's attributes and the trace's tags, so
``mlflow.search_traces(filter_string="tags.validate = 'True'")`` finds them.

The store is the tracker's: ``trainer.tracking.mlflow.tracking_uri``, else ``MLFLOW_TRACKING_URI``, else
``<run_dir>/mlruns`` (the run's directory comes from the plugin's ``on_run_start`` hook; outside ``rlcore run``
MLflow's own default ``./mlruns``), resolved at the first export. MLflow's trace exporter follows the
process-global tracking URI, which is pointed at the store during each export and restored after it. The experiment is
``trainer.tracking.mlflow.experiment_name``, else ``MLFLOW_EXPERIMENT_NAME``, else ``trace.project_name``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from rlcore.api import Span, TraceSettings, TrajectoryTrace, tracker_section, with_text
from rlcore_plugin_mlflow.config import MlflowConfig
from rlcore_plugin_mlflow.tracker import store_uri

#: the directory of this process's run, recorded by the plugin's ``on_run_start`` hook
_RUN: dict[str, Path] = {}


def remember_run_dir(run_dir: Path) -> None:
    """Record the run's directory: the default trace store is ``<run_dir>/mlruns``, the mlflow tracker's."""
    _RUN["dir"] = Path(run_dir)


def _tag(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class MlflowTraceBackend:
    """Sends rlcore's trajectory traces to MLflow's tracing API (``mlflow.start_span_no_context``)."""

    #: libraries the dry run checks for
    requires: ClassVar[tuple[str, ...]] = ("mlflow",)

    def __init__(self, config: Any, settings: TraceSettings) -> None:
        import mlflow  # noqa: F401 - a missing library fails when the run starts, not at the first rollout

        self.config = config
        self.settings = settings
        self.experiment_id: str | None = None

    def _connect(self) -> str:
        """Resolve the store and the experiment (once); the experiment's id."""
        from mlflow.tracking import MlflowClient

        if self.experiment_id is not None:
            return self.experiment_id
        mlflow_settings = tracker_section(self.config, MlflowConfig)
        self.tracking_uri = store_uri(mlflow_settings.chosen_tracking_uri(_RUN.get("dir", Path.cwd())))
        name = mlflow_settings.chosen_experiment_name(self.settings.project_name)
        client = MlflowClient(tracking_uri=self.tracking_uri)
        experiment = client.get_experiment_by_name(name)
        self.experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
        return self.experiment_id

    def _child(self, span: Span, parent: Any, decode: Callable[[Sequence[int]], str] | None) -> None:
        import mlflow

        live = mlflow.start_span_no_context(
            span.name,
            span_type=span.span_type,
            parent_span=parent,
            inputs=with_text(span.inputs, decode),
            start_time_ns=span.start_ns,
        )
        live.end(
            outputs=with_text(span.outputs, decode),
            attributes={"error": span.error} if span.error else None,
            status="ERROR" if span.error else "OK",
            end_time_ns=max(span.end_ns, span.start_ns),
        )

    def export(self, traces: Sequence[TrajectoryTrace], decode: Callable[[Sequence[int]], str] | None) -> None:
        """Log each trajectory as one trace, then wait until MLflow's asynchronous exporter has written them."""
        import mlflow

        experiment_id = self._connect()
        # MLflow exports traces to its global tracking URI (and mirrors it in MLFLOW_TRACKING_URI): point it at
        # the store for this export only, so that nothing else in the process (the tracker) is redirected
        previous = os.environ.get("MLFLOW_TRACKING_URI") or None
        mlflow.set_tracking_uri(self.tracking_uri)
        try:
            for trace in traces:
                root = trace.root
                attributes = {**trace.attributes, "experiment_name": self.settings.experiment_name}
                live = mlflow.start_span_no_context(
                    root.name,
                    span_type=root.span_type,
                    inputs=with_text(root.inputs, decode),
                    attributes=attributes,
                    tags={key: _tag(value) for key, value in attributes.items()},
                    experiment_id=experiment_id,
                    start_time_ns=root.start_ns,
                )
                for child in root.children:
                    self._child(child, live, decode)
                live.end(
                    outputs=with_text(root.outputs, decode),
                    attributes={"error": root.error} if root.error else None,
                    status="ERROR" if root.error else "OK",
                    end_time_ns=max(root.end_ns, root.start_ns),
                )
            mlflow.flush_trace_async_logging()
        finally:
            # None is accepted (it unsets MLFLOW_TRACKING_URI again) though mlflow annotates str | Path
            mlflow.set_tracking_uri(previous)  # type: ignore[arg-type]
