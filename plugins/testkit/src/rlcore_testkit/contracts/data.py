"""Contract suite for ``dataset`` components.

Subclass :class:`DatasetContract` in a test module, name the subclass ``Test...``, set
``component_name`` and provide a ``dataset_files`` fixture returning the file(s) the dataset reads::

    import pytest
    from rlcore_testkit.contracts.data import DatasetContract

    class TestMyDataset(DatasetContract):
        component_name = "my-jsonl"

        @pytest.fixture
        def dataset_files(self, tmp_path):
            path = tmp_path / "train.jsonl"
            path.write_text(...)
            return [str(path)]

The dataset class is resolved through the process-wide registry and constructed exactly as in a run:
``cls(files, tokenizer, config.data, "train")`` with rlcore's default ``data`` section plus
``data_overrides``, and the tiny ChatML tokenizer of the ``tiny_tokenizer`` fixture. The files must hold
at least two rows whose chat-templated prompts are longer than :attr:`DatasetContract.short_length`
tokens (any real prompt is). The suite checks left padding, position ids, every truncation mode against the
untruncated ids, the overlong filter, and that rows collate into a :class:`rlcore.api.batch.Batch`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import torch

from rlcore_testkit.config import contract_config

#: a length no test prompt reaches, for the untruncated reference rows
LONG_LENGTH = 4096


def data_config(overrides: dict[str, Any]) -> Any:
    """rlcore's default ``data`` section (with plugin sections loaded) after ``overrides`` (keys below ``data``)."""
    return contract_config({f"data.{key}": value for key, value in overrides.items()}).data


def unpadded(row: dict[str, Any]) -> list[int]:
    """The ids of a left-padded row where its attention mask is 1."""
    return row["input_ids"][row["attention_mask"].bool()].tolist()


class DatasetContract:
    """Tests every prompt dataset must pass; subclasses set ``component_name`` and a ``dataset_files`` fixture."""

    #: the registered dataset name under test
    component_name: ClassVar[str] = ""
    #: the ``max_prompt_length`` of the padding and truncation tests (shorter than every test prompt)
    short_length: ClassVar[int] = 8
    #: extra ``data.*`` keys for every dataset the suite builds
    data_overrides: ClassVar[dict[str, Any]] = {}

    @pytest.fixture
    def dataset_files(self) -> Any:
        """The file(s) to read; subclasses must override this fixture."""
        pytest.fail(f"{type(self).__name__} must define a `dataset_files` fixture")

    def make_dataset(self, files: Any, tokenizer: Any, **overrides: Any) -> Any:
        """Construct the dataset under test with ``data_overrides`` and then ``overrides`` applied."""
        from rlcore import get_component

        cls = get_component("dataset", self.component_name)
        return cls(files, tokenizer, data_config({**self.data_overrides, **overrides}), "train")

    def reference_rows(self, files: Any, tokenizer: Any) -> list[list[int]]:
        """The untruncated prompt ids of every row."""
        dataset = self.make_dataset(files, tokenizer, max_prompt_length=LONG_LENGTH, truncation="error")
        return [unpadded(dataset[i]) for i in range(len(dataset))]

    def test_component_is_registered(self) -> None:
        """``data.dataset=<component_name>`` resolves to a class."""
        from rlcore import get_component

        assert isinstance(get_component("dataset", self.component_name), type)

    def test_rows_are_left_padded(self, dataset_files: Any, tiny_tokenizer: Any) -> None:
        """input_ids/attention_mask/position_ids are 1-D LongTensors of max_prompt_length, padded on the left."""
        dataset = self.make_dataset(dataset_files, tiny_tokenizer, max_prompt_length=LONG_LENGTH, truncation="error")
        assert len(dataset) >= 2
        pad = tiny_tokenizer.pad_token_id
        for i in range(len(dataset)):
            row = dataset[i]
            for key in ("input_ids", "attention_mask", "position_ids"):
                assert row[key].dtype == torch.long and row[key].shape == (LONG_LENGTH,), key
            mask = row["attention_mask"]
            n = int(mask.sum())
            assert n > 0
            assert mask[LONG_LENGTH - n :].eq(1).all() and mask[: LONG_LENGTH - n].eq(0).all(), "not left-padded"
            assert row["input_ids"][: LONG_LENGTH - n].eq(pad).all(), "padding is not the pad token"

    def test_position_ids_follow_the_mask(self, dataset_files: Any, tiny_tokenizer: Any) -> None:
        """position_ids == clip(cumsum(attention_mask) - 1, 0)."""
        dataset = self.make_dataset(dataset_files, tiny_tokenizer, max_prompt_length=LONG_LENGTH, truncation="error")
        for i in range(len(dataset)):
            row = dataset[i]
            expected = torch.clamp(torch.cumsum(row["attention_mask"], 0) - 1, min=0)
            assert torch.equal(row["position_ids"], expected)

    @pytest.mark.parametrize("mode", ["left", "right", "middle"])
    def test_truncation_keeps_the_right_tokens(self, mode: str, dataset_files: Any, tiny_tokenizer: Any) -> None:
        """left keeps the tail, right the head, middle half of each end; raw_prompt_ids match input_ids."""
        full = self.reference_rows(dataset_files, tiny_tokenizer)
        n = self.short_length
        dataset = self.make_dataset(dataset_files, tiny_tokenizer, max_prompt_length=n, truncation=mode)
        assert len(dataset) == len(full)
        for i, ids in enumerate(full):
            assert len(ids) > n, f"row {i} of dataset_files is too short for the truncation test"
            row = dataset[i]
            assert row["input_ids"].shape == (n,) and int(row["attention_mask"].sum()) == n
            expected = {"left": ids[-n:], "right": ids[:n], "middle": ids[: n // 2] + ids[-(n - n // 2) :]}[mode]
            assert unpadded(row) == expected
            assert list(row["raw_prompt_ids"]) == expected

    def test_error_truncation_or_filter(self, dataset_files: Any, tiny_tokenizer: Any) -> None:
        """truncation=error rejects overlong prompts with an RLCoreError; filter_overlong_prompts drops them."""
        from rlcore.api import RLCoreError

        with pytest.raises(RLCoreError):
            self.make_dataset(dataset_files, tiny_tokenizer, max_prompt_length=self.short_length, truncation="error")[0]
        full = self.reference_rows(dataset_files, tiny_tokenizer)
        limit = sorted(len(ids) for ids in full)[0]
        kept = self.make_dataset(
            dataset_files, tiny_tokenizer, max_prompt_length=limit, truncation="error", filter_overlong_prompts=True
        )
        assert len(kept) == sum(len(ids) <= limit for ids in full)
        assert all(int(kept[i]["attention_mask"].sum()) <= limit for i in range(len(kept)))

    def test_rows_carry_reward_fields_and_collate(self, dataset_files: Any, tiny_tokenizer: Any) -> None:
        """Rows carry data_source/reward_model/extra_info and collate into a Batch of object arrays."""
        from rlcore.api import collate_rows

        dataset = self.make_dataset(dataset_files, tiny_tokenizer, max_prompt_length=LONG_LENGTH, truncation="error")
        rows = [dataset[i] for i in range(min(len(dataset), 4))]
        for row in rows:
            assert isinstance(row["data_source"], str) and row["data_source"]
            assert "ground_truth" in row["reward_model"]
            assert isinstance(row["extra_info"], dict)
        batch = collate_rows(rows)
        assert len(batch) == len(rows)
        assert batch["input_ids"].shape == (len(rows), LONG_LENGTH)
        assert batch["data_source"].dtype == object and batch["data_source"].shape == (len(rows),)
