"""Rollout tracing (``actor_rollout_ref.rollout.trace``): real tool-agent rollouts on the HF engine traced to a
local MLflow store and read back with MLflow's API; sampling of traced groups; bad settings named."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_plugin_agents.runner import AgentRunner, left_pad
from rlcore_plugin_hf.engine import HFRolloutEngine
from rlcore_testkit.contracts.chat_templates import tool_chat_pair
from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides, tiny_run

from rlcore.api import RolloutConfig, TraceSettings, traced
from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

RESPONSE_LENGTH = 80


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Any]:
    return tool_chat_pair("qwen2.5")


def _rollout(
    tmp_path: Path, pair: tuple[Any, Any], *overrides: str, uids: list[str] | None = None
) -> tuple[Any, Batch]:
    """Six arithmetic prompts through the tool agent with the calculator; returns ``(runner, output batch)``."""
    tokenizer, model = pair
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: calculator\n")
    cfg = load_config(
        overrides=[
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
            f"trainer.runs_dir={tmp_path / 'runs'}",
            "trainer.project_name=trace-test",
            "trainer.experiment_name=exp",
            *overrides,
        ]
    )
    messages = [[{"role": "user", "content": f"{a}*{a + 3}="}] for a in range(11, 17)]
    rows = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    ids, mask = left_pad(
        [tokenizer(r, add_special_tokens=False)["input_ids"] for r in rows], tokenizer.pad_token_id, 96
    )
    non_tensors = {"extra_info": np.array([{"index": 100 + i} for i in range(len(rows))], dtype=object)}
    if uids is not None:
        non_tensors["uid"] = np.array(uids, dtype=object)
    batch = Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)},
        non_tensors,
        {"validate": False, "do_sample": False},
    )
    engine = HFRolloutEngine(None, tokenizer, RolloutConfig.from_tree(cfg), module=model)
    runner = AgentRunner(cfg, tokenizer, load_plugins().registry)
    with torch.no_grad():
        return runner, runner.run(batch, engine.generate)


def _traces(uri: str) -> list[Any]:
    """Every trace in experiment ``trace-test`` of the store at ``uri``, read back with MLflow's client."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("trace-test")
    assert experiment is not None, "no MLflow experiment named after trainer.project_name"
    return list(client.search_traces(locations=[experiment.experiment_id], max_results=1000))


def test_mlflow_traces_every_trajectory_with_its_turns_tools_and_text(tmp_path: Path, pair) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    tokenizer, _ = pair
    env_before = os.environ.get("MLFLOW_TRACKING_URI")
    _, out = _rollout(
        tmp_path,
        pair,
        "actor_rollout_ref.rollout.trace.backend=mlflow",
        "actor_rollout_ref.rollout.trace.token2text=true",
        f"trainer.tracking.mlflow.tracking_uri={uri}",
    )
    traces = _traces(uri)
    assert len(traces) == len(out) == 6
    assert os.environ.get("MLFLOW_TRACKING_URI") == env_before  # MLflow's global tracking URI is left as it was
    by_index = {}
    for trace in traces:
        spans = trace.data.spans
        (root,) = [s for s in spans if s.parent_id is None]
        by_index[root.attributes["sample_index"]] = (root, spans)
        assert root.name == "agent_loop" and root.attributes["rollout_n"] == 0
        assert root.attributes["validate"] is False and root.attributes["experiment_name"] == "exp"
        assert trace.info.tags["sample_index"] == str(root.attributes["sample_index"])
        generations = [s for s in spans if s.name == "generate"]
        tools = [s for s in spans if s.name.startswith("tool:")]
        assert len(generations) == root.outputs["assistant_turns"] >= 1
        assert root.outputs["num_turns"] == 1 + len(generations) + (1 if tools else 0)
        for span in generations:  # token2text: the decoded text next to the ids
            assert span.outputs["response_text"] == tokenizer.decode(span.outputs["response_ids"])
            assert span.inputs["prompt_text"] == tokenizer.decode(span.inputs["prompt_ids"])
        for span in tools:  # the call as parsed (malformed ones with their parse error) and the model's reply
            assert span.inputs["parse_error"] or "expression" in span.inputs["arguments"]
            assert span.outputs["text"].startswith("Error: malformed") == bool(span.inputs["parse_error"])
            assert span.end_time_ns >= span.start_time_ns
        assert root.outputs["metrics"].get("tool/calls", 0) == len(tools)
    assert sorted(by_index) == list(range(100, 106))
    assert any(s.name.startswith("tool:") for _, spans in by_index.values() for s in spans), "no tool call traced"
    for row, index in enumerate(range(100, 106)):  # the root's response ids are the trajectory's, unpadded
        root, _ = by_index[index]
        count = int(out["attention_mask"][row, 96:].sum())
        assert root.outputs["response_ids"][:count] == out["responses"][row, :count].tolist()
        assert root.outputs["policy_tokens"] == int(out["response_mask"][row].sum())


def test_max_samples_traces_whole_groups(tmp_path: Path, pair) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    runner, _ = _rollout(
        tmp_path,
        pair,
        "actor_rollout_ref.rollout.trace.backend=mlflow",
        "actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=1",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1",
        f"trainer.tracking.mlflow.tracking_uri={uri}",
        uids=["a", "a", "b", "b", "c", "c"],
    )
    roots = [next(s for s in t.data.spans if s.parent_id is None) for t in _traces(uri)]
    assert len(roots) == 2, "one group of two rollouts"
    assert sorted(r.attributes["rollout_n"] for r in roots) == [0, 1]
    assert len({r.attributes["sample_index"] for r in roots}) == 2  # the dataset's index of each row
    assert runner.tracer.traces == []  # handed to the backend


def test_tracing_off_builds_nothing(tmp_path: Path, pair) -> None:
    runner, out = _rollout(tmp_path, pair, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1")
    assert runner.tracer is None and len(out) == 6

    async def work() -> int:
        return 7

    assert asyncio.run(traced("x", "TOOL", {}, work(), lambda r: {"r": r})) == 7  # no trace: just the result


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("actor_rollout_ref.rollout.trace.token2text=maybe", "trace.token2text='maybe' has the wrong type"),
        ("actor_rollout_ref.rollout.trace.max_samples_per_step_per_worker=-1", "non-negative integer"),
    ],
)
def test_bad_trace_values_are_named(override: str, message: str) -> None:
    with pytest.raises(RLCoreError, match=re.escape(message)):
        TraceSettings.from_config(load_config(overrides=[override]))


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("weave", "actor_rollout_ref.rollout.trace.backend=weave needs Weave: pip install weave"),
        ("trackio", "actor_rollout_ref.rollout.trace.backend=trackio: no trace backend 'trackio'"),
        ("tensorboard", "the 'tensorboard' tracker has no trace backend"),
    ],
)
def test_dry_run_names_a_missing_backend(tmp_path: Path, tiny_model_dir: Path, backend: str, message: str) -> None:
    pytest.importorskip("mlflow")
    if backend == "weave" and __import__("importlib").util.find_spec("weave") is not None:
        pytest.skip("weave is installed")
    task = make_tiny_task(tmp_path / "task")
    result = dry_run(
        *tiny_overrides(tmp_path, tiny_model_dir, task), f"actor_rollout_ref.rollout.trace.backend={backend}"
    )
    assert result.exit_code != 0
    assert message in result.output, result.output


def test_a_training_run_traces_its_rollouts_to_the_default_store(tmp_path: Path, pair) -> None:
    """``rlcore run`` with ``trace.backend=mlflow`` and no MLflow settings: training and validation
    trajectories land in the tracker's default store ``<run_dir>/mlruns``, experiment ``trainer.project_name``."""
    tokenizer, model = pair
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: calculator\n")
    task = make_tiny_task(tmp_path / "task", train_rows=4, test_rows=2)
    _, run_dir = tiny_run(
        tmp_path,
        model_dir,
        task,
        "trainer.total_training_steps=1",
        "trainer.project_name=trace-test",
        "data.max_prompt_length=128",
        "data.max_response_length=48",
        "data.return_raw_chat=false",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.trace.backend=mlflow",
    )
    traces = _traces((run_dir / "mlruns").as_uri())
    roots = [next(s for s in t.data.spans if s.parent_id is None) for t in traces]
    validation = [r for r in roots if r.attributes["validate"]]
    training = [r for r in roots if not r.attributes["validate"]]
    assert len(training) == 4 * 2 and len(validation) >= 2  # 4 prompts × n=2; the validation set, greedy
    assert sorted(r.attributes["rollout_n"] for r in training) == [0] * 4 + [1] * 4
    assert all("prompt_text" not in r.inputs for r in roots)  # token2text is off
