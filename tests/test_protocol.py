"""Tests for :mod:`rlcore.api.batch`: the Batch and every operation the controller and workers use."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from rlcore.api.batch import Batch, BatchError, BatchIndexError, BatchKeyError, BatchTypeError
from rlcore.errors import RLCoreError


def make_batch(n: int = 4, meta: dict | None = None) -> Batch:
    """A batch of ``n`` rows: two tensors (2-D and 1-D) and two object arrays (ints and dicts)."""
    return Batch.from_dict(
        {
            "ids": torch.arange(n * 3).reshape(n, 3),
            "score": torch.arange(n, dtype=torch.float32),
            "uid": [f"u{i}" for i in range(n)],
            "info": [{"row": i, "tags": [i, i]} for i in range(n)],
        },
        meta=meta if meta is not None else {"temperature": 1.0},
    )


def rows_of(batch: Batch) -> list[int]:
    """The original row numbers of a batch built by :func:`make_batch` (read from ``info``)."""
    return [info["row"] for info in batch["info"]]


# --- construction -------------------------------------------------------------------------------------


def test_construct_and_access() -> None:
    batch = make_batch(4)
    assert len(batch) == 4
    assert batch.keys() == ["ids", "score", "uid", "info"]
    assert list(batch) == batch.keys()
    assert "ids" in batch and "uid" in batch and "nope" not in batch
    assert isinstance(batch["ids"], torch.Tensor)
    info = batch["info"]
    assert info.dtype == object and info.shape == (4,)
    assert info[2] == {"row": 2, "tags": [2, 2]}
    assert batch.meta == {"temperature": 1.0}


def test_list_of_lists_becomes_1d_object_array() -> None:
    batch = Batch(non_tensors={"msgs": [[1, 2], [3, 4], [5, 6]], "pairs": ((1, 2), (3, 4), (5, 6))})
    assert batch["msgs"].shape == (3,) and batch["msgs"][1] == [3, 4]
    assert batch["pairs"].shape == (3,) and batch["pairs"][2] == (5, 6)


def test_numeric_array_becomes_object_array() -> None:
    batch = Batch(non_tensors={"x": np.array([1, 2, 3])})
    assert batch["x"].dtype == object and batch["x"].tolist() == [1, 2, 3]


def test_empty_batch_has_length_zero() -> None:
    assert len(Batch()) == 0
    assert len(Batch(meta={"metrics": {"a": 1}})) == 0
    assert not Batch()


def test_mismatched_lengths_name_key_and_lengths() -> None:
    with pytest.raises(BatchError, match=r"'uid' has 2 rows but 'ids' has 3"):
        Batch({"ids": torch.zeros(3, 2)}, {"uid": ["a", "b"]})
    with pytest.raises(BatchError, match=r"'b' has 4 rows but 'a' has 3") as info:
        Batch({"a": torch.zeros(3), "b": torch.zeros(4)})
    assert isinstance(info.value, (RLCoreError, ValueError))


def test_invalid_values_are_rejected() -> None:
    with pytest.raises(BatchTypeError, match="'t'.*0-dimensional"):
        Batch({"t": torch.tensor(1.0)})
    with pytest.raises(BatchTypeError, match="'x'.*1-D"):
        Batch(non_tensors={"x": np.zeros((2, 2))})
    with pytest.raises(BatchTypeError, match="'s'.*meta"):
        Batch.from_dict({"s": "a string"})
    with pytest.raises(BatchTypeError, match="'t'.*torch.Tensor"):
        Batch({"t": [1, 2]})
    with pytest.raises(BatchError, match="'k' is given both"):
        Batch({"k": torch.zeros(2)}, {"k": [1, 2]})
    with pytest.raises(TypeError, match="strings"):
        Batch({1: torch.zeros(2)})


def test_from_dict_routes_values() -> None:
    batch = Batch.from_dict({"t": torch.zeros(2), "l": [1, 2], "a": np.array(["x", "y"], dtype=object)}, meta={"m": 1})
    assert set(batch.tensors) == {"t"}
    assert set(batch.non_tensors) == {"l", "a"}
    assert batch.meta == {"m": 1}


# --- item access ----------------------------------------------------------------------------------------


def test_missing_key_lists_available_keys() -> None:
    batch = make_batch(2)
    with pytest.raises(BatchKeyError, match=r"'nope' is not in the Batch; available keys: \['ids'") as info:
        batch["nope"]
    assert isinstance(info.value, KeyError)
    with pytest.raises(KeyError, match="nope"):
        del batch["nope"]


def test_setitem_and_delitem() -> None:
    batch = make_batch(3)
    batch["extra"] = torch.ones(3, 5)
    batch["names"] = ["a", "b", "c"]
    assert "extra" in batch.tensors and batch["names"].dtype == object
    batch["names"] = torch.zeros(3)  # replaces the non-tensor with a tensor
    assert "names" in batch.tensors and "names" not in batch.non_tensors
    with pytest.raises(BatchError, match=r"'bad' has 2 rows but the Batch has 3 \(from 'ids'\)"):
        batch["bad"] = torch.zeros(2)
    del batch["extra"], batch["uid"]
    assert "extra" not in batch and "uid" not in batch


def test_setitem_may_replace_the_only_key_with_another_length() -> None:
    batch = Batch({"a": torch.zeros(3)})
    batch["a"] = torch.zeros(5)
    assert len(batch) == 5


# --- index --------------------------------------------------------------------------------------------


def test_index_int_returns_one_row_batch() -> None:
    batch = make_batch(4)
    row = batch[2]
    assert len(row) == 1 and rows_of(row) == [2]
    assert torch.equal(row["ids"], batch["ids"][2:3])
    assert rows_of(batch[-1]) == [3]
    assert rows_of(batch[np.int64(1)]) == [1]
    assert rows_of(batch[torch.tensor(0)]) == [0]
    with pytest.raises(BatchIndexError, match="row 4 is out of range for a Batch of 4 rows"):
        batch[4]


def test_index_slice_list_and_arrays() -> None:
    batch = make_batch(6)
    assert rows_of(batch[1:5:2]) == [1, 3]
    assert rows_of(batch[::-2]) == [5, 3, 1]
    assert rows_of(batch.index([4, 0, -1])) == [4, 0, 5]
    assert rows_of(batch[np.array([2, 2, 1])]) == [2, 2, 1]
    picked = batch[torch.tensor([5, 1])]
    assert rows_of(picked) == [5, 1]
    assert torch.equal(picked["score"], torch.tensor([5.0, 1.0]))
    assert len(batch[[]]) == 0
    with pytest.raises(BatchIndexError, match="row 9"):
        batch[[0, 9]]
    with pytest.raises(BatchTypeError, match="integers or bools"):
        batch[np.array([0.5])]
    with pytest.raises(BatchTypeError, match="integer or bool"):
        batch[torch.tensor([0.5])]
    with pytest.raises(BatchTypeError):
        batch[True]


def test_index_copies_meta_shallowly() -> None:
    batch = make_batch(3, meta={"temperature": 0.7, "metrics": {"a": 1}})
    sub = batch[[0, 1]]
    sub.meta["temperature"] = 0.0
    assert batch.meta["temperature"] == 0.7
    assert sub.meta["metrics"] is batch.meta["metrics"]


@pytest.mark.parametrize("as_mask", [np.array, torch.tensor, list], ids=["numpy", "torch", "list"])
def test_bool_mask_index(as_mask: Callable[[list[bool]], Any]) -> None:
    batch = make_batch(5)
    kept = batch[as_mask([True, False, True, False, True])]
    assert rows_of(kept) == [0, 2, 4]
    assert kept["uid"].tolist() == ["u0", "u2", "u4"]
    assert torch.equal(kept["ids"], batch["ids"][[0, 2, 4]])
    with pytest.raises(BatchError, match="mask has 2 entries but the Batch has 5 rows"):
        batch[as_mask([True, False])]


# --- select / pop / union -------------------------------------------------------------------------------


def test_select_mixes_tensor_and_non_tensor_keys() -> None:
    batch = make_batch(3)
    sub = batch.select(["ids", "uid"])
    assert sub.keys() == ["ids", "uid"]
    assert sub["ids"] is batch["ids"]
    assert batch.select("score").keys() == ["score"]
    everything = batch.select()
    assert everything.keys() == batch.keys() and everything.tensors is not batch.tensors
    with pytest.raises(BatchKeyError, match="'nope'"):
        batch.select(["ids", "nope"])


def test_pop_removes_and_returns() -> None:
    batch = make_batch(3)
    popped = batch.pop(["score", "info"])
    assert popped.keys() == ["score", "info"] and len(popped) == 3
    assert batch.keys() == ["ids", "uid"]
    assert popped.meta == batch.meta and popped.meta is not batch.meta
    with pytest.raises(BatchKeyError, match="'score'"):
        batch.pop(["ids", "score"])
    assert batch.keys() == ["ids", "uid"]  # nothing removed on error


def test_union_merges_in_place() -> None:
    batch = make_batch(3, meta={"temperature": 1.0, "metrics": {"a": 1, "b": 2}})
    other = Batch(
        {"ids": batch["ids"].clone(), "new": torch.ones(3)},
        {"uid": list(batch["uid"])},
        meta={"temperature": 1.0, "step": 4, "metrics": {"b": 3, "c": 4}},
    )
    assert batch.union(other) is batch
    assert batch.keys() == ["ids", "score", "new", "uid", "info"]
    assert batch.meta == {"temperature": 1.0, "metrics": {"a": 1, "b": 3, "c": 4}, "step": 4}


def test_union_with_empty_metrics_batch() -> None:
    batch = make_batch(2)
    batch.union(Batch(meta={"metrics": {"actor/loss": 0.5}}))
    assert batch.meta["metrics"] == {"actor/loss": 0.5} and len(batch) == 2


def test_union_conflicts_name_the_key_and_change_nothing() -> None:
    batch = make_batch(3)
    before = batch.keys()
    with pytest.raises(BatchError, match="tensor 'score' differs"):
        batch.union(Batch({"score": torch.zeros(3), "new": torch.zeros(3)}))
    with pytest.raises(BatchError, match="non-tensor 'uid' differs"):
        batch.union(Batch(non_tensors={"uid": ["u0", "u1", "x"]}))
    with pytest.raises(BatchError, match="non-tensor 'info' differs"):
        batch.union(Batch(non_tensors={"info": [{"row": 0, "tags": [0, 0]}, {"row": 1}, {"row": 2}]}))
    with pytest.raises(BatchError, match="'uid' is a non-tensor here but a tensor"):
        batch.union(Batch({"uid": torch.zeros(3)}))
    with pytest.raises(BatchError, match="meta 'temperature' differs"):
        batch.union(Batch(meta={"temperature": 0.5}))
    with pytest.raises(BatchError, match="2 rows into one of 3 rows"):
        batch.union(Batch({"x": torch.zeros(2)}))
    assert batch.keys() == before and batch.meta == {"temperature": 1.0}


def test_union_accepts_equal_values_including_nan() -> None:
    batch = Batch({"v": torch.tensor([1.0, float("nan")])}, {"d": [{"a": np.array([1, 2])}, {"a": None}]})
    other = Batch({"v": torch.tensor([1.0, float("nan")])}, {"d": [{"a": np.array([1, 2])}, {"a": None}]})
    batch.union(other)
    assert batch.keys() == ["v", "d"]


# --- chunk / split / concat --------------------------------------------------------------------------------


def test_chunk_concat_round_trip() -> None:
    batch = make_batch(6)
    parts = batch.chunk(3)
    assert [rows_of(p) for p in parts] == [[0, 1], [2, 3], [4, 5]]
    joined = Batch.concat(parts)
    assert joined.keys() == batch.keys()
    for key in batch.tensors:
        assert torch.equal(joined[key], batch[key])
    assert joined["uid"].tolist() == batch["uid"].tolist()
    assert joined["info"].tolist() == batch["info"].tolist()
    assert joined.meta == batch.meta


def test_chunk_requires_divisible_length() -> None:
    with pytest.raises(BatchError, match="5 rows into 2 equal parts.*pad_to_divisor"):
        make_batch(5).chunk(2)
    with pytest.raises(BatchError, match="chunks must be >= 1"):
        make_batch(4).chunk(0)


def test_split_last_part_shorter() -> None:
    parts = make_batch(5).split(2)
    assert [rows_of(p) for p in parts] == [[0, 1], [2, 3], [4]]
    assert len(Batch().split(3)) == 1


def test_concat_merges_metrics_into_lists() -> None:
    parts = [
        make_batch(2, meta={"temperature": 1.0, "metrics": {"loss": 0.5, "grad": [1.0, 2.0]}}),
        make_batch(1, meta={"temperature": 1.0, "metrics": {"loss": 0.25, "grad": 3.0, "only": 7}}),
        make_batch(1, meta={"temperature": 1.0}),
    ]
    joined = Batch.concat(parts)
    assert len(joined) == 4
    assert joined.meta == {
        "temperature": 1.0,
        "metrics": {"loss": [0.5, 0.25], "grad": [1.0, 2.0, 3.0], "only": [7]},
    }


def test_concat_of_empty_metric_batches() -> None:
    joined = Batch.concat([Batch(meta={"metrics": {"actor/loss": 1.0}}), Batch(meta={"metrics": {"actor/loss": 2.0}})])
    assert len(joined) == 0 and joined.meta == {"metrics": {"actor/loss": [1.0, 2.0]}}


def test_concat_errors() -> None:
    with pytest.raises(BatchError, match="meta 'temperature' differs"):
        Batch.concat([make_batch(2), make_batch(2, meta={"temperature": 0.5})])
    with pytest.raises(BatchError, match="meta 'temperature' is set in part 0 but missing from part 1"):
        Batch.concat([make_batch(2), make_batch(2, meta={})])
    other = make_batch(2)
    del other["uid"]
    with pytest.raises(BatchError, match=r"part 1's non-tensor keys differ.*missing \['uid'\]"):
        Batch.concat([make_batch(2), other])
    other = make_batch(2)
    other["score"] = other["score"].double()
    with pytest.raises(BatchError, match="tensor 'score' is torch.float32 in part 0 but torch.float64 in part 1"):
        Batch.concat([make_batch(2), other])
    other = make_batch(2)
    other["ids"] = torch.zeros(2, 5, dtype=torch.int64)
    with pytest.raises(BatchError, match="cannot concatenate tensor 'ids'"):
        Batch.concat([make_batch(2), other])
    with pytest.raises(BatchError, match="at least one"):
        Batch.concat([])


# --- repeat / reorder / pad ---------------------------------------------------------------------------------


def test_repeat_interleave_and_tile() -> None:
    batch = make_batch(2)
    inter = batch.repeat(2, interleave=True)
    assert rows_of(inter) == [0, 0, 1, 1]
    assert inter["uid"].tolist() == ["u0", "u0", "u1", "u1"]
    assert torch.equal(inter["ids"], torch.tensor([[0, 1, 2], [0, 1, 2], [3, 4, 5], [3, 4, 5]]))
    tiled = batch.repeat(3, interleave=False)
    assert rows_of(tiled) == [0, 1, 0, 1, 0, 1]
    assert torch.equal(tiled["score"], torch.tensor([0.0, 1.0] * 3))
    assert tiled["info"].shape == (6,) and tiled["info"][2] == {"row": 0, "tags": [0, 0]}
    assert tiled.meta == batch.meta
    with pytest.raises(BatchError, match="repeats must be >= 1"):
        batch.repeat(0)


def test_reorder_in_place() -> None:
    batch = make_batch(4)
    assert batch.reorder(torch.tensor([3, 1, 0, 2])) is None
    assert rows_of(batch) == [3, 1, 0, 2]
    assert batch["uid"].tolist() == ["u3", "u1", "u0", "u2"]
    assert torch.equal(batch["score"], torch.tensor([3.0, 1.0, 0.0, 2.0]))
    with pytest.raises(BatchError, match="permutation of range"):
        batch.reorder([0, 0, 1, 2])


@pytest.mark.parametrize(("n", "divisor", "expected_pad"), [(3, 8, 5), (5, 4, 3), (4, 2, 0), (1, 3, 2)])
def test_pad_unpad_round_trip(n: int, divisor: int, expected_pad: int) -> None:
    batch = make_batch(n)
    padded, pad = batch.pad_to_divisor(divisor)
    assert pad == expected_pad and len(padded) % divisor == 0 and len(padded) == n + pad
    assert rows_of(padded) == [i % n for i in range(n)] + [i % n for i in range(pad)]
    restored = padded.unpad(pad)
    assert restored.keys() == batch.keys()
    for key in batch.tensors:
        assert torch.equal(restored[key], batch[key])
    assert restored["info"].tolist() == batch["info"].tolist()
    assert padded.tensors is not batch.tensors


def test_unpad_rejects_bad_sizes() -> None:
    with pytest.raises(BatchError, match="between 0 and the Batch length 3"):
        make_batch(3).unpad(4)
    with pytest.raises(BatchTypeError):
        make_batch(3).unpad(1.0)


# --- device, repr, pickle -------------------------------------------------------------------------------------


def test_to_moves_tensors_in_place() -> None:
    batch = make_batch(2)
    assert batch.to("cpu") is batch
    assert batch.to(torch.device("meta"))["ids"].device.type == "meta"


def test_repr_summarizes_keys() -> None:
    text = repr(make_batch(2))
    assert text.startswith("Batch(len=2, tensors={ids: (2, 3) int64, score: (2,) float32}")
    assert "uid: (2,)" in text and "meta=['temperature']" in text


def test_pickle_round_trip() -> None:
    batch = make_batch(4, meta={"temperature": 1.0, "metrics": {"a": [1, 2]}})
    restored = pickle.loads(pickle.dumps(batch))
    assert restored.keys() == batch.keys() and restored.meta == batch.meta
    for key in batch.tensors:
        assert torch.equal(restored[key], batch[key])
    assert restored["info"].tolist() == batch["info"].tolist()


def test_pickled_chunk_does_not_carry_parent_storage() -> None:
    big = Batch({"x": torch.zeros(64, 256)})
    whole = len(pickle.dumps(big))
    part = big.chunk(8)[1]
    size = len(pickle.dumps(part))
    assert size < whole / 4
    assert torch.equal(pickle.loads(pickle.dumps(part))["x"], part["x"])
