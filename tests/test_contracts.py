"""The contract suites of the kinds that have no other subclass in the core: presets and batch filters."""

from __future__ import annotations

import types

import numpy as np
import pytest
from rlcore_testkit.contracts import CONTRACTS, BatchFilterContract, PresetContract

import rlcore
from rlcore.api.batch import Batch
from rlcore.api.kinds import KINDS


def keep_varied_groups(batch: Batch, config) -> tuple[Batch, dict[str, float]]:
    """Keep the prompt groups (same ``uid``) whose sequence scores are not all equal."""
    scores = batch["token_level_scores"].sum(-1).numpy()
    uids = batch["uid"]
    varied = {uid for uid in set(uids) if np.ptp(scores[uids == uid]) > 0}
    keep = np.array([uid in varied for uid in uids])
    return batch[keep], {"filter/kept_groups": float(len(varied))}


class TestBundledPresetContract(PresetContract):
    component_name = "arith-cpu"


class TestGroupFilterContract(BatchFilterContract):
    component_name = "test-keep-varied"

    @pytest.fixture(autouse=True)
    def _registered_filter(self, registered):
        def register_batch_filters(register):
            register("test-keep-varied", keep_varied_groups)

        plugin = types.SimpleNamespace(register_batch_filters=rlcore.hookimpl(register_batch_filters))
        with registered(plugin, name="filter-plugin"):
            yield

    def test_drops_uniform_groups(self, batch_filter, config) -> None:
        from rlcore_testkit.contracts.components import contract_batch

        kept, metrics = batch_filter(contract_batch(groups=4, n=4), config)
        assert len(kept) == 8 and metrics["filter/kept_groups"] == 2.0


def test_every_kind_has_a_contract() -> None:
    assert set(CONTRACTS) == set(KINDS)
