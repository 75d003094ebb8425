"""Contract suites for ``batch_filter`` and ``preset`` components.

::

    from rlcore_testkit.contracts import BatchFilterContract, PresetContract

    class TestMyFilter(BatchFilterContract):
        component_name = "nonzero-std"

    class TestMyPreset(PresetContract):
        component_name = "dapo"
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
import torch

from rlcore import load_plugins
from rlcore.api import Batch, load_config


def contract_batch(groups: int = 4, n: int = 4, response_length: int = 5, seed: int = 0) -> Batch:
    """A post-reward batch of ``groups`` prompts x ``n`` responses, with mixed and uniform groups."""
    gen = torch.Generator().manual_seed(seed)
    size = groups * n
    scores = torch.zeros(size, response_length)
    lengths = torch.randint(1, response_length + 1, (size,), generator=gen)
    for g in range(groups):
        for j in range(n):
            i = g * n + j
            value = float(j % 2) if g % 2 == 0 else 1.0  # even groups vary, odd groups are all-correct
            scores[i, lengths[i] - 1] = value
    mask = (torch.arange(response_length).unsqueeze(0) < lengths.unsqueeze(1)).float()
    uid = np.array([f"uid-{i // n}" for i in range(size)], dtype=object)
    return Batch.from_dict(
        {
            "responses": torch.randint(0, 100, (size, response_length), generator=gen),
            "response_mask": mask,
            "token_level_scores": scores,
            "token_level_rewards": scores.clone(),
            "uid": uid,
            "data_source": np.array(["contract"] * size, dtype=object),
        }
    )


class BatchFilterContract:
    """Behaviour every ``batch_filter`` must have: it returns a subset of the rows it was given."""

    component_name: ClassVar[str]
    #: dotted config overrides applied before calling the filter
    config_overrides: ClassVar[list[str]] = []

    @pytest.fixture
    def batch_filter(self) -> Any:
        """The registered filter callable."""
        return load_plugins().registry.load("batch_filter", self.component_name)

    @pytest.fixture
    def config(self) -> Any:
        """The run config the filter receives."""
        return load_config(overrides=self.config_overrides)

    def test_returns_a_subset_with_the_same_keys(self, batch_filter: Any, config: Any) -> None:
        batch = contract_batch()
        kept, metrics = batch_filter(batch, config)
        assert isinstance(kept, Batch)
        assert set(kept.keys()) >= set(batch.keys())
        assert len(kept) <= len(batch)
        originals = {tuple(row.tolist()) for row in batch["responses"]}
        assert all(tuple(row.tolist()) in originals for row in kept["responses"])
        assert all(isinstance(v, (int, float)) for v in metrics.values())

    def test_is_deterministic(self, batch_filter: Any, config: Any) -> None:
        first, _ = batch_filter(contract_batch(), config)
        second, _ = batch_filter(contract_batch(), config)
        assert torch.equal(first["responses"], second["responses"])


class PresetContract:
    """Behaviour every ``preset`` must have: it names only known keys and changes something."""

    component_name: ClassVar[str]

    def test_applies_to_the_default_config(self) -> None:
        base = load_config()
        with_preset = load_config(presets=[self.component_name])
        assert with_preset != base, f"preset {self.component_name!r} changes nothing"

    def test_user_overrides_win(self) -> None:
        cfg = load_config(presets=[self.component_name], overrides=["trainer.experiment_name=from-user"])
        assert cfg.trainer.experiment_name == "from-user"
