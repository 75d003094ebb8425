"""Ulysses sequence parallelism (``ulysses_sequence_parallel_size``) in the FSDP engine, on gloo processes.

Two processes with SP=2 (one data-parallel rank) and four with SP=2 × DP=2 compute the same log-probs,
entropies, gradient norm and updated log-probs as one process with SP=1, for padded and packed
(``use_remove_padding``) micro-batches whose lengths are odd. The DeepSpeed engine runs the same checks in
its plugin's tests. Also: the layout and data-parallel arithmetic, and the errors for sizes that cannot run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from rlcore_testkit import runs
from rlcore_testkit import sequence_parallel as sp_checks

from rlcore.errors import RLCoreError


@pytest.fixture(scope="module")
def one_rank(tiny_model_dir: Path) -> dict[bool, dict[str, Any]]:
    """The SP=1 results in this process, padded and packed."""
    return {packed: sp_checks.run_case("fsdp", tiny_model_dir, packed=packed) for packed in (False, True)}


def test_the_batch_has_odd_lengths(tiny_model_dir: Path) -> None:
    """The sequences (and some packed micro-batches of 2 rows) do not split evenly over 2 ranks."""
    batch = sp_checks.global_batch(tiny_model_dir)
    assert batch["input_ids"].shape[1] % 2 == 1
    packed_lengths = batch["attention_mask"].sum(-1).view(-1, 2).sum(-1)
    assert (packed_lengths % 2 == 1).any()


def test_two_ranks_split_every_sequence(tiny_model_dir: Path, one_rank: dict, tmp_path: Path) -> None:
    """SP=2 on 2 processes: log-probs and entropies within 1e-5, the updated log-probs within 1e-4."""
    ranks = sp_checks.spawn_ranks("fsdp", tiny_model_dir, tmp_path, world_size=2, sp=2)
    sp_checks.assert_matches(ranks, one_rank, sp=2)


def test_four_ranks_are_two_data_parallel_ranks_of_two(tiny_model_dir: Path, one_rank: dict, tmp_path: Path) -> None:
    """SP=2 × DP=2 on 4 processes: ranks 0-1 take the first half of the batch, ranks 2-3 the second, and
    the update equals the one-process update on the whole batch."""
    ranks = sp_checks.spawn_ranks("fsdp", tiny_model_dir, tmp_path, world_size=4, sp=2)
    sp_checks.assert_matches(ranks, one_rank, sp=2)


def test_padded_packed_rows_split_over_two_ranks(tiny_model_dir: Path, one_rank: dict, tmp_path: Path) -> None:
    """``pad_to_length`` under SP=2 with a bucket of 7 tokens (rounded up to 8, a multiple of the group size): the
    actor's and the critic's packed rows end in padding, and every result equals the one-process unpadded one."""
    bucket = {"pad_to_length": True, "pad_to_length_bucket": 7}
    packed_overrides = {
        **{f"actor_rollout_ref.actor.{key}": value for key, value in bucket.items()},
        **{f"critic.{key}": value for key, value in bucket.items()},
    }
    ranks = sp_checks.spawn_ranks(
        "fsdp", tiny_model_dir, tmp_path, world_size=2, sp=2, packed_overrides=packed_overrides
    )
    sp_checks.assert_matches(ranks, one_rank, sp=2)


def test_layout_of_sequence_parallel_groups() -> None:
    """Consecutive ranks share a data-parallel rank; the first of each group returns the outputs."""
    from rlcore.modelkit.sequence_parallel import parallel_layout

    layouts = [parallel_layout(rank, 4, 2) for rank in range(4)]
    assert [(lay.dp_rank, lay.dp_size, lay.is_output_rank) for lay in layouts] == [
        (0, 2, True),
        (0, 2, False),
        (1, 2, True),
        (1, 2, False),
    ]


def dry_run(*args: str) -> Any:
    """``rlcore run --dry-run`` of 4 ranks with ``args``."""
    base = ["data.train_files=x.parquet", "actor_rollout_ref.model.path=m"]
    ranks = ["trainer.executor=ray", "trainer.n_gpus_per_node=4", "data.train_batch_size=8"]
    return runs.dry_run(*base, *ranks, "actor_rollout_ref.actor.ppo_mini_batch_size=4", *args)


def test_dry_run_divides_the_data_parallel_size_by_the_sequence_parallel_size() -> None:
    result = dry_run("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2")
    assert result.exit_code == 0, result.output
    assert "data-parallel ranks: 2 (of 4 ranks; world / ulysses_sequence_parallel_size 2" in result.output
    assert "(4 prompts = 2 responses per rank each)" in result.output


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=3 must divide the number of data-parallel ranks",
        ),
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=0",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size must be a positive integer, got 0",
        ),
    ],
)
def test_sizes_that_cannot_run_fail_the_dry_run(override: str, message: str) -> None:
    result = dry_run(override)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("role", "override", "message"),
    [
        (
            "actor_rollout_ref",
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
            "actor_rollout_ref.ref.ulysses_sequence_parallel_size=2 must equal "
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size (1)",
        ),
        ("critic", "critic.ulysses_sequence_parallel_size", "critic.ulysses_sequence_parallel_size=2 must divide"),
    ],
)
def test_workers_reject_sizes_that_cannot_run(tiny_model_dir: Path, role: str, override: str, message: str) -> None:
    """The reference model runs in the actor's group (same size); a critic of one rank cannot split by 2."""
    from rlcore_testkit.contracts.backend import TrainingBackendContract

    from rlcore.workers.actor import ActorRolloutRefWorker
    from rlcore.workers.critic import CriticWorker

    settings = type("Settings", (TrainingBackendContract,), {"component_name": "fsdp"})
    config = settings.make_config(tiny_model_dir, **{override: 2})
    worker_cls = CriticWorker if role == "critic" else ActorRolloutRefWorker
    with pytest.raises(RLCoreError, match=re.escape(message)):
        worker_cls(config, role, 0, 1)


def test_a_packed_row_reaches_the_attention_as_its_sequences(tiny_model_dir: Path) -> None:
    """Under Ulysses a packed micro-batch gets no ``[nnz, nnz]`` mask: the model's mask mapping holds the
    sequences of the whole row, the end padding (to a multiple of the group size) a sequence of its own, and
    each rank's slice of the tokens is half the padded row."""
    from rlcore.modelkit.packed_attention import PackedSequences
    from rlcore.modelkit.packing import pack_batch
    from rlcore.modelkit.sequence_parallel import SequenceParallel, shard_packed

    batch = sp_checks.global_batch(tiny_model_dir)
    pairs = batch["attention_mask"].sum(-1).view(-1, 2).sum(-1)
    first = 2 * int(torch.nonzero(pairs % 2 == 1)[0])
    packed = pack_batch(batch.index(slice(first, first + 2)), "key")
    nnz = packed.input_ids.shape[1]
    assert nnz % 2 == 1
    for rank in (0, 1):
        sharded = shard_packed(packed, SequenceParallel(group=None, size=2, rank=rank))
        mask = sharded.model_kwargs()["attention_mask"]["full_attention"]
        assert isinstance(mask, PackedSequences)
        assert mask.lengths == (*packed.lengths, 1) and mask.total == nnz + 1
        assert sharded.input_ids.shape == (1, (nnz + 1) // 2)


def test_heads_must_divide_by_the_group_size(tiny_model_dir: Path) -> None:
    """The tiny model has 2 query heads: a group of 4 cannot split them (checked before any all-to-all)."""
    from transformers import AutoModelForCausalLM

    from rlcore.modelkit.sequence_parallel import SequenceParallel, install

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(
        RLCoreError,
        match=r"x\.ulysses_sequence_parallel_size=4 must divide the model's number of attention heads \(2\)",
    ):
        install(model, SequenceParallel(group=None, size=4, rank=0), "x.ulysses_sequence_parallel_size")


@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_liger_on_cpu_is_a_clear_error(strategy: str) -> None:
    """``use_liger`` cannot run without CUDA: the run stops before any model is built, naming the key."""
    result = runs.dry_run(
        "data.train_files=x.parquet",
        "actor_rollout_ref.model.path=m",
        "trainer.device=cpu",
        f"actor_rollout_ref.actor.strategy={strategy}",
        "actor_rollout_ref.model.use_liger=true",
    )
    assert result.exit_code == 2, result.output
    assert "actor_rollout_ref.model.use_liger=true needs a CUDA device" in result.output
    assert "Traceback" not in result.output
