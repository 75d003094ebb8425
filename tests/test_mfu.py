"""MFU on every run: the FLOP count from a model config, the device peak, the per-call memory ledger, and
``perf/mfu/*`` in a real tiny run's ``metrics.jsonl`` with the probe's peak in ``derived.json``."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rlcore_testkit.runs import make_tiny_task, tiny_run
from transformers import Qwen2Config, Qwen3Config, Qwen3MoeConfig

from rlcore.algos.metrics import compute_memory_metrics
from rlcore.controller.call_stats import CallLedger, CallMeter, CallStats
from rlcore.tracking import device_peak as peak_module
from rlcore.tracking.device_peak import device_peak, table_peak_flops
from rlcore.tracking.flops import flops_model, mfu_metrics
from rlcore.tracking.sinks import read_metrics

TINY = {
    "vocab_size": 1024,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
}


# ------------------------------------------------------------------------------------------------ FLOPs
def test_dense_flops_match_a_hand_count() -> None:
    """Qwen2, hidden 64, MLP 128, 2 layers, 2 heads / 1 KV head of 32, vocab 1024, sequences of 3 and 5 tokens."""
    model = flops_model(Qwen2Config(**TINY))
    assert model is not None
    q_proj, k_proj, v_proj, o_proj = 64 * 64, 64 * 32, 64 * 32, 64 * 64  # 4096 + 2048 + 2048 + 4096
    mlp = 3 * 64 * 128  # gate, up, down: 24576
    lm_head = 1024 * 64  # 65536; the embedding lookup is no matmul
    n = 2 * (q_proj + k_proj + v_proj + o_proj + mlp) + lm_head
    assert model.matmul_params == n == 139264
    tokens, squares = 3 + 5, 3 * 3 + 5 * 5
    forward = 2 * n * tokens + 4 * (2 * 32) * 2 * squares  # matmuls + scores and weighted sum, 2 layers
    assert model.forward_flops([3, 5]) == forward == 2245632
    assert model.training_flops([3, 5]) == 3 * forward


def test_qwen3_1_7b_counts_its_matmul_weights() -> None:
    """Qwen3-1.7B's matmul weights are its parameters less the norms (the tied embedding counted once, as the
    LM head)."""
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    )
    model = flops_model(config)
    assert model is not None
    per_layer = 2048 * (2048 + 2 * 1024) + 2048 * 2048 + 3 * 2048 * 6144
    assert model.matmul_params == 28 * per_layer + 151936 * 2048 == 1_720_451_072


def test_mixture_of_experts_counts_the_active_experts_and_dense_layers() -> None:
    """qwen3_moe with 4 experts, 2 per token, MLP-only layer 1: the router and two experts in layer 0, the dense
    MLP in layer 1."""
    config = Qwen3MoeConfig(
        **{**TINY, "num_hidden_layers": 2},
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        decoder_sparse_step=1,
        mlp_only_layers=[1],
    )
    model = flops_model(config)
    assert model is not None
    attention = 64 * (64 + 2 * 32) + 64 * 64
    layer0 = attention + 64 * 4 + 2 * 3 * 64 * 32
    layer1 = attention + 3 * 64 * 128
    assert model.matmul_params == layer0 + layer1 + 1024 * 64


def test_sliding_window_layers_count_only_the_window() -> None:
    """A sliding layer of window 4 sees ``s · min(s, 4)`` query-key pairs; a full layer ``s²``."""
    config = Qwen2Config(**TINY, use_sliding_window=True, sliding_window=4, max_window_layers=1)
    model = flops_model(config)
    assert model is not None and model.windows == (None, 4)
    assert model.attention_pairs([3, 10]) == (9 + 100) + (3 * 3 + 10 * 4)


def test_vision_language_config_counts_its_text_model() -> None:
    """qwen2_vl: the text config's sizes are used (the vision tower is not counted)."""
    from transformers import Qwen2VLConfig

    config = Qwen2VLConfig(text_config=TINY)
    model = flops_model(config)
    assert model is not None and model.model_type == "qwen2_vl"
    assert model.matmul_params == flops_model(Qwen2Config(**TINY)).matmul_params


def test_unknown_model_type_uses_the_generic_formula_with_one_note(caplog: pytest.LogCaptureFixture) -> None:
    """A model type outside the known list is counted from its sizes, with one warning; a config without
    the sizes gives None (no MFU) rather than an error."""
    config = SimpleNamespace(model_type="mystery_lm_test", **TINY)
    with caplog.at_level(logging.WARNING, logger="rlcore.tracking.flops"):
        first = flops_model(config)
        second = flops_model(config)
    assert first is not None and second is not None
    assert first.matmul_params == flops_model(Qwen2Config(**TINY)).matmul_params
    assert sum("mystery_lm_test" in r.getMessage() for r in caplog.records) == 1
    assert flops_model(SimpleNamespace(model_type="no_sizes_test", hidden_size=64)) is None


def test_mfu_divides_by_time_peak_and_world_size() -> None:
    """``perf/mfu/actor`` counts ``ppo_epochs`` training passes; log-prob stages one forward; a stage that
    did not run (no worker time) is left out."""
    model = flops_model(Qwen2Config(**TINY))
    assert model is not None
    lengths = {"actor": [3, 5], "old_log_prob": [3, 5], "ref": [3, 5]}
    worker_s = {"update_actor": 2.0, "compute_log_prob": 0.5}
    metrics = mfu_metrics(model, lengths, worker_s, peak_flops=1e9, world_size=2, ppo_epochs=3)
    assert set(metrics) == {"perf/mfu/actor", "perf/mfu/old_log_prob"}
    assert math.isclose(metrics["perf/mfu/actor"], 3 * 3 * 2245632 / (2.0 * 1e9 * 2))
    assert math.isclose(metrics["perf/mfu/old_log_prob"], 2245632 / (0.5 * 1e9 * 2))


# ------------------------------------------------------------------------------------------ device peak
@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA H20", 148.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L40S", 362.0),
        ("NVIDIA L40", 181.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA GeForce RTX 2060", None),
    ],
)
def test_gpu_table_matches_the_most_specific_name(name: str, tflops: float | None) -> None:
    """PCIe/NVL variants, H20 against H200 and L40 against L40S are told apart; an unknown GPU has no entry."""
    assert table_peak_flops(name) == (None if tflops is None else tflops * 1e12)


def test_cpu_probe_is_measured_once_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first call probes and caches under ``$RLCORE_CACHE``, keyed by device, torch, dtype and threads;
    the second reads the cache; another dtype probes again."""
    monkeypatch.setenv("RLCORE_CACHE", str(tmp_path))
    first = device_peak(torch.device("cpu"), torch.float32)
    again = device_peak(torch.device("cpu"), torch.float32)
    assert first.source == "probe" and again.source == "cache" and again.flops == first.flops > 0
    entries = json.loads((tmp_path / "peak_flops.json").read_text())
    (key,) = entries
    assert (
        key.startswith("cpu|")
        and f"torch {torch.__version__}" in key
        and key.endswith(f"|float32|threads {torch.get_num_threads()}")
    )
    assert first.as_dict() == {
        "device": first.device,
        "dtype": "float32",
        "source": "probe",
        "tflops": round(first.flops / 1e12, 6),
    }


def test_damaged_cache_still_gives_a_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache file that is not JSON is reported and bypassed: the run still gets a measured peak."""
    monkeypatch.setenv("RLCORE_CACHE", str(tmp_path))
    (tmp_path / "peak_flops.json").write_text("{not json")
    peak = device_peak(torch.device("cpu"), torch.float32)
    assert peak.source == "probe" and peak.flops > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU peak table needs CUDA")
def test_cuda_bf16_peak_comes_from_the_table_or_a_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU in bf16: the table's figure for a known device, else a probe (the CPU path's twin)."""
    monkeypatch.setenv("RLCORE_CACHE", str(tmp_path))
    peak = device_peak(torch.device("cuda"), torch.bfloat16)
    expected = table_peak_flops(torch.cuda.get_device_name())
    assert peak.source == ("table" if expected else "probe") and peak.flops > 0
    assert peak_module.probe_matmul_flops(torch.device("cuda"), torch.bfloat16) > 1e12


# ------------------------------------------------------------------------------------------------ memory
def test_ledger_sums_seconds_and_keeps_the_largest_peak() -> None:
    """A call's seconds are its slowest rank's and add up over calls; its memory is the largest over ranks and
    calls; popping resets."""
    ledger = CallLedger()
    ledger.add("update_actor", [CallStats(1.0, 2.0, 3.0), CallStats(1.5, 4.0, 5.0)])
    ledger.add("update_actor", [CallStats(0.5, 1.0, 1.0)])
    ledger.add("generate_sequences", [CallStats(2.0)])
    assert ledger.pop_seconds() == {"update_actor": 2.0, "generate_sequences": 2.0}
    assert ledger.pop_memory_gb() == {"update_actor": (4.0, 5.0)}
    assert ledger.pop_seconds() == {} and ledger.pop_memory_gb() == {}


def test_memory_metrics_per_method_and_overall() -> None:
    """``perf/max_memory_{allocated,reserved}_gb/<method>`` and verl's overall maxima; nothing without CUDA."""
    metrics = compute_memory_metrics({"update_actor": (10.0, 12.0), "generate_sequences": (14.0, 20.0)})
    assert metrics == {
        "perf/max_memory_allocated_gb/update_actor": 10.0,
        "perf/max_memory_reserved_gb/update_actor": 12.0,
        "perf/max_memory_allocated_gb/generate_sequences": 14.0,
        "perf/max_memory_reserved_gb/generate_sequences": 20.0,
        "perf/max_memory_allocated_gb": 14.0,
        "perf/max_memory_reserved_gb": 20.0,
    }
    assert compute_memory_metrics({}) == {}


def test_meter_on_cpu_measures_time_only() -> None:
    """Without CUDA in use a call reports its seconds and no memory."""
    with CallMeter() as meter:
        torch.ones(1000).sum()
    assert meter.stats.seconds > 0 and meter.stats.max_allocated_gb is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="peak-memory figures need CUDA")
def test_meter_on_cuda_sees_the_calls_own_peak() -> None:
    """A 256 MiB allocation inside the call is its peak; the peak from before the call is not."""
    before = torch.empty(2**30, dtype=torch.uint8, device="cuda")  # 1 GiB, freed before the call
    del before
    with CallMeter() as meter:
        block = torch.empty(2**28, dtype=torch.uint8, device="cuda")
        del block
    assert meter.stats.max_allocated_gb is not None and 0.25 <= meter.stats.max_allocated_gb < 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="asynchronous kernels need CUDA")
def test_meter_on_cuda_waits_for_the_calls_kernels() -> None:
    """A call that only queues a long kernel lasts as long as the kernel (CUDA events time it), not the launch;
    a kernel queued before the call is not counted."""
    torch.cuda.init()
    torch.cuda._sleep(200_000_000)  # queued before the call
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with CallMeter() as meter:
        start.record()
        torch.cuda._sleep(400_000_000)
        end.record()
    end.synchronize()
    kernel_s = start.elapsed_time(end) / 1000
    assert kernel_s > 0.05
    assert 0.9 * kernel_s <= meter.stats.seconds < kernel_s + 0.05


# -------------------------------------------------------------------------------------------- a real run
def test_tiny_run_logs_mfu_and_records_the_peak(
    tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two CPU steps with a reference model and two mini-batches: ``perf/mfu/actor``, ``old_log_prob`` and
    ``ref`` in every step's metrics, the CPU probe's peak in ``derived.json``, no GPU memory metrics."""
    monkeypatch.setenv("RLCORE_CACHE", str(tmp_path / "cache"))
    task = make_tiny_task(tmp_path / "task")
    _, run_dir = tiny_run(tmp_path, tiny_model_dir, task, "actor_rollout_ref.actor.use_kl_loss=true")
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "timing_s/step" in r]
    assert len(rows) == 2
    for row in rows:
        for stage in ("actor", "old_log_prob", "ref"):
            assert 0 < row[f"perf/mfu/{stage}"] < math.inf
        assert not any(key.startswith("perf/max_memory") for key in row)
    peak = json.loads((run_dir / "derived.json").read_text())["device_peak"]
    assert peak["source"] == "probe" and peak["dtype"] == "float32" and peak["tflops"] > 0
    cached = json.loads((tmp_path / "cache" / "peak_flops.json").read_text())
    assert [round(v / 1e12, 6) for v in cached.values()] == [peak["tflops"]]
