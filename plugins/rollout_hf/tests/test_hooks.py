"""The plugin's hooks: ``hf`` is registered by this distribution, and its lines of the run plan (chunks) come
from its ``plan_lines`` hook in ``rlcore run --dry-run``, where a setting it cannot run stops the run."""

from __future__ import annotations

from rlcore_testkit import runs

from rlcore import load_plugins

#: the overrides of a dry run that needs no data or model on disk
BASE = ("data.train_files=x.parquet", "actor_rollout_ref.model.path=some/model", "trainer.device=cpu")


def test_hf_is_registered_by_this_distribution() -> None:
    """The ``hf`` rollout engine comes from ``rlcore-plugin-hf``'s entry point, not from the core."""
    component = load_plugins().registry.get("rollout_engine", "hf")
    assert component.plugin == "rlcore-plugin-hf"
    assert component.target == "rlcore_plugin_hf.engine:HFRolloutEngine"


def test_the_dry_run_prints_the_chunk_line_and_stops_on_a_bad_budget() -> None:
    """The chunk line is in the plan of an ``hf`` run and absent from a ``vllm`` run's; a bad
    ``max_num_batched_tokens`` is one error naming the key, and the run stops."""
    line = "rollout chunks (hf engine): on CPU 64 rows per chunk (actor_rollout_ref.rollout.max_num_batched_tokens=8192"
    result = runs.dry_run(*BASE, "data.max_prompt_length=96", "data.max_response_length=32")
    assert result.exit_code == 0, result.output
    assert line in result.output

    other = runs.dry_run(*BASE, "actor_rollout_ref.rollout.name=vllm")
    assert "rollout chunks" not in other.output

    bad = runs.dry_run(*BASE, "actor_rollout_ref.rollout.max_num_batched_tokens=0")
    assert bad.exit_code != 0
    assert "actor_rollout_ref.rollout.max_num_batched_tokens must be a positive integer or null, got 0" in bad.output
