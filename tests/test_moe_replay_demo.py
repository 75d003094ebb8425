"""Routing replay lowers the rollout/training mismatch on the tiny MoE model (issue 32's demonstration):
``bench/moe_replay.py`` trains the same GRPO step twice, with replay off and with R3, in bfloat16 on the CPU
(the rollout decodes with a KV cache, training runs a full forward: near-tied routers flip)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "moe_replay.py"


@pytest.mark.slow
def test_r3_replay_lowers_the_rollout_training_mismatch() -> None:
    """Same rollout in both runs (R3 only records it), so the mismatch differs by the routing alone: lower with
    R3; the recomputed top-k disagrees with the replayed one on a few (token, layer) pairs; both runs log the
    MoE metrics."""
    out = subprocess.run(
        [sys.executable, str(BENCH), "--size", "tiny", "--steps", "1", "--cpu-bf16"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    modes = json.loads(out.stdout)["modes"]
    off, replayed = modes["off"], modes["R3"]
    assert off["router_replay_agreement"] is None
    assert 0.9 < replayed["router_replay_agreement"] < 1.0
    assert 0 < replayed["probs_diff_mean"] < off["probs_diff_mean"]
    assert replayed["probs_diff_max"] <= off["probs_diff_max"]
    for mode in (off, replayed):
        assert mode["moe_aux_loss"] > 0 and mode["moe_load_max_over_mean"] >= 1.0
