"""The long-tailed task (preset ``arith-tail-cpu``): seeded, heavy-tailed response budgets on the sums task's
rows, which the engines read as per-row caps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from rlcore_plugin_tasks import arith_tail

from rlcore.api import Batch, row_token_caps


def test_budgets_are_seeded_and_heavy_tailed() -> None:
    budgets = np.array(arith_tail.budgets(20000))
    assert arith_tail.budgets(50) == arith_tail.budgets(50)
    assert budgets.min() >= arith_tail.MIN_BUDGET and budgets.max() == arith_tail.MAX_BUDGET
    p50, p90, p99 = np.percentile(budgets, [50, 90, 99])
    # a Pareto tail: the 99th percentile is an order of magnitude above the median, the mean well above it
    assert p50 <= 10 and p90 >= 20 and p99 >= 10 * p50 and budgets.mean() > 1.5 * p50


def test_rows_carry_their_budget_which_the_engines_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLCORE_CACHE", str(tmp_path))
    folder = arith_tail.prepare_assets()
    train = pq.read_table(folder / "train.parquet").to_pylist()
    assert len(train) == 320 and len(pq.read_table(folder / "test.parquet").to_pylist()) == 80
    caps = [row["extra_info"]["max_new_tokens"] for row in train]
    assert caps == arith_tail.budgets(320)
    infos = np.empty(3, dtype=object)
    infos[:] = [row["extra_info"] for row in train[:3]]
    batch = Batch.from_dict({"extra_info": infos})
    assert row_token_caps(batch, 192).tolist() == caps[:3]
    preset = arith_tail.cpu_preset()
    assert preset["data.max_response_length"] == arith_tail.MAX_BUDGET
    assert preset["actor_rollout_ref.rollout.ignore_eos"] is True
