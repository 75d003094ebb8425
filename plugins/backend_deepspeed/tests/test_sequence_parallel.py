"""Ulysses sequence parallelism in the DeepSpeed engine: SP=2 on 2 gloo processes under ZeRO-3 equals SP=1
in one process (log-probs and entropies within 1e-5, the updated log-probs within 1e-4), padded and packed,
with sequences of odd length. The same checks as the FSDP engine's (``tests/test_ulysses.py``)."""

from __future__ import annotations

from pathlib import Path

from rlcore_testkit import sequence_parallel as sp_checks

ZERO3 = {"actor_rollout_ref.actor.deepspeed_config.zero_stage": 3}


def test_two_ranks_split_every_sequence(tiny_model_dir: Path, tmp_path: Path) -> None:
    one = {
        packed: sp_checks.run_case("deepspeed", tiny_model_dir, packed=packed, overrides=ZERO3)
        for packed in (False, True)
    }
    ranks = sp_checks.spawn_ranks("deepspeed", tiny_model_dir, tmp_path, world_size=2, sp=2, overrides=ZERO3)
    sp_checks.assert_matches(ranks, one, sp=2)
