"""The batch filter: which groups it keeps, and rlcore's contract suite."""

from __future__ import annotations

from rlcore_testkit.contracts import BatchFilterContract
from rlcore_testkit.contracts.components import contract_batch
from rlcore_plugin_{{ cookiecutter.underscored }}.batch_filter import keep_varied_groups


def test_keeps_only_groups_with_varied_rewards() -> None:
    """The contract batch has varied even groups and all-correct odd groups: only the even ones stay."""
    batch = contract_batch(groups=4, n=4)
    kept, metrics = keep_varied_groups(batch, None)
    assert sorted(set(kept["uid"])) == ["uid-0", "uid-2"]
    assert len(kept) == 8
    assert metrics["{{ cookiecutter.hyphenated }}/kept_group_fraction"] == 0.5


class TestBatchFilterContract(BatchFilterContract):
    """rlcore's behavioural checks for ``algorithm.batch_filters=[{{ cookiecutter.hyphenated }}]``."""

    component_name = "{{ cookiecutter.hyphenated }}"
