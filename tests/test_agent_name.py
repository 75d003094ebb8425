"""verl's ``agent_name`` dataset column: ``RLDataset`` passes it on, and each row of a real run goes through the
agent loop it names (rows without one through the default loop)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rlcore_plugin_agents.loops import SingleTurnAgentLoop
from rlcore_testkit.runs import make_tiny_task, tiny_run

import rlcore
from rlcore.agents.trajectory import Trajectory
from rlcore.api import AgentSample
from rlcore.data import DataError
from rlcore.data.rl_dataset import RLDataset


class Recording(SingleTurnAgentLoop):
    """The single-turn loop, recording the ``extra_info.index`` of every sample it runs."""

    seen: list[int] = []

    async def run(self, sample: AgentSample) -> Trajectory:
        Recording.seen.append(int(sample.extra_info["index"]))
        return await super().run(sample)


def with_agent_names(path: Path, names: list[Any]) -> None:
    table = pq.read_table(path)
    pq.write_table(table.append_column("agent_name", pa.array(names, type=pa.string())), path)


def test_each_row_runs_the_loop_it_names(registered, tmp_path: Path, tiny_model_dir: Path) -> None:
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=4)
    # rows 0, 3 and 6 name the recording loop, 1, 4 and 7 the single-turn loop, the others none
    with_agent_names(task["train"], [("recording", "single_turn", None)[i % 3] for i in range(8)])
    with_agent_names(task["test"], [None] * 4)
    plugin = types.SimpleNamespace(
        register_agent_loops=rlcore.hookimpl(lambda register: register("recording", Recording))
    )
    Recording.seen = []
    with registered(plugin):
        tiny_run(
            tmp_path,
            tiny_model_dir,
            task,
            "algorithm.adv_estimator=grpo",
            "data.shuffle=false",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "trainer.total_training_steps=1",
            "trainer.test_freq=-1",
        )
    assert sorted(Recording.seen) == [0, 0, 0, 0, 3, 3, 3, 3, 6, 6, 6, 6]  # rollout.n=4 responses per prompt


def test_a_bad_agent_name_is_named(tmp_path: Path, tiny_tokenizer: Any) -> None:
    task = make_tiny_task(tmp_path / "task", train_rows=3, test_rows=1)
    table = pq.read_table(task["train"])
    pq.write_table(table.append_column("agent_name", pa.array([None, 5, None], type=pa.int64())), task["train"])
    with pytest.raises(DataError, match=r"row 1.*key 'agent_name' must be the name of an agent loop"):
        RLDataset(str(task["train"]), tiny_tokenizer, None)
