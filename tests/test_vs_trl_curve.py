"""``bench/vs_trl.py --curve``: the settings both frameworks get, the per-seed data order, the statistics
across seeds, and its errors; the second bundled task (``arith-chain-cpu``) it compares on.

The comparison itself (minutes of training on both sides, TRL installed) is run by hand and its figures are
in ``bench/README.md``; here the pieces are checked against rlcore's real config loader and ``rlcore run
--dry-run``. With TRL installed, its ``GRPOConfig`` must accept the mapped settings.
"""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rlcore_plugin_tasks import arith_chain
from rlcore_plugin_tasks.warm_start import shipped_model_dir
from rlcore_testkit.contracts import PresetContract
from rlcore_testkit.runs import dry_run

from rlcore.config.loader import load_config

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def curve() -> Any:
    """``bench/learning_curve.py``, imported the way ``vs_trl.py`` imports it (``bench/`` on ``sys.path``)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("learning_curve", BENCH / "learning_curve.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


@pytest.fixture(scope="module")
def arith_settings(curve: Any) -> dict[str, Any]:
    """The settings of ``--task arith`` from the preset's real resolved config (no assets built)."""
    return curve.settings_from_config(load_config([], [], ["arith-cpu"]), "arith", "none", None)


def test_settings_are_the_presets(arith_settings: dict[str, Any], curve: Any) -> None:
    s = arith_settings
    assert (s["prompts_per_step"], s["generations"], s["mini_batch_prompts"], s["ppo_epochs"]) == (16, 8, 8, 1)
    assert (s["lr"], s["weight_decay"], s["betas"], s["grad_clip"]) == (3e-5, 0.0, [0.9, 0.999], 1.0)
    assert (s["clip_low"], s["clip_high"], s["kl_coef"], s["scale_by_std"]) == (0.2, 0.2, 0.0, True)
    assert (s["max_response_length"], s["temperature"], s["preset_steps"], s["preset_test_freq"]) == (4, 1.0, 40, 5)
    assert s["model"] == str(shipped_model_dir("arith-base")) and s["val_file"].endswith("test.parquet")
    kl = curve.settings_from_config(load_config([], [], ["arith-cpu"]), "arith", "low_var_kl", None)
    assert kl["kl"] == "low_var_kl" and kl["kl_coef"] == 0.001


def test_trl_config_matches_the_update_shape(
    arith_settings: dict[str, Any], curve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 prompts x 8 = 128 completions per generation, cut into 2 mini-batches of 64: 2 TRL steps per RL step."""
    # the bench runs TRL in a process of its own; in this one an in-process DeepSpeed engine may have set
    # LOCAL_RANK (deepspeed.initialize needs it), which makes accelerate start torch.distributed
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    kwargs = curve.trl_config_kwargs(arith_settings, seed=3, steps=40, out_dir="out", kl_bias_correction=False)
    assert kwargs["per_device_train_batch_size"] == 64
    assert kwargs["steps_per_generation"] == 2 and kwargs["gradient_accumulation_steps"] == 1
    assert kwargs["max_steps"] == 80 and kwargs["num_iterations"] == 1
    assert kwargs["loss_type"] == "bnpo" and kwargs["scale_rewards"] == "group" and kwargs["beta"] == 0.0
    assert (kwargs["epsilon"], kwargs["epsilon_high"], kwargs["learning_rate"]) == (0.2, 0.2, 3e-5)
    assert kwargs["lr_scheduler_type"] == "constant" and kwargs["shuffle_dataset"] is False
    if importlib.util.find_spec("trl") is None:
        return
    from trl import GRPOConfig

    config = GRPOConfig(**kwargs)
    assert config.generation_batch_size == 128 and config.steps_per_generation == 2


def test_unmapped_settings_are_refused_by_key(curve: Any) -> None:
    cfg = load_config([], ["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"], ["arith-cpu"])
    with pytest.raises(curve.BenchError, match="loss_agg_mode='seq-mean-token-mean'"):
        curve.settings_from_config(cfg, "arith", "none", None)
    cfg = load_config([], ["actor_rollout_ref.actor.optim.lr_warmup_steps=3"], ["arith-cpu"])
    with pytest.raises(curve.BenchError, match="lr_warmup_steps"):
        curve.settings_from_config(cfg, "arith", "none", None)
    with pytest.raises(curve.BenchError, match="unknown --kl 'k1'"):
        curve.settings_from_config(load_config([], [], ["arith-cpu"]), "arith", "k1", None)


@pytest.mark.parametrize("kl", ["none", "low_var_kl"])
def test_rlcore_overrides_are_a_valid_run(arith_settings: dict[str, Any], curve: Any, tmp_path: Path, kl: str) -> None:
    """The overrides of one seed's run pass ``rlcore run --dry-run`` and set what they must."""
    settings = dict(arith_settings, kl=kl, kl_coef=0.001 if kl != "none" else 0.0)
    overrides = curve.rlcore_curve_overrides(settings, 2, 30, 5, tmp_path / "train.parquet", tmp_path / "runs")
    result = dry_run("--preset", "arith-cpu", *overrides)
    assert result.exit_code == 0, result.output
    for line in (
        "shuffle: false",
        "seed: 2",
        "test_freq: 5",
        "total_training_steps: 30",
        "ppo_micro_batch_size_per_gpu: 64",
    ):
        assert line in result.output
    assert f"use_kl_loss: {'true' if kl != 'none' else 'false'}" in result.output


def test_every_seed_gets_its_own_fixed_order(curve: Any) -> None:
    rows = [{"i": i} for i in range(10)]
    first = curve.ordered_rows(rows, 25, seed=1)
    assert first == curve.ordered_rows(rows, 25, seed=1)
    assert len(first) == 25
    assert sorted(r["i"] for r in first[:10]) == list(range(10)) and sorted(r["i"] for r in first[10:20]) == list(
        range(10)
    )
    assert first[:10] != first[10:20], "each epoch has its own permutation"
    assert curve.ordered_rows(rows, 25, seed=2) != first
    with pytest.raises(curve.BenchError, match="no training rows"):
        curve.ordered_rows([], 4, seed=1)


def test_statistics_across_seeds(curve: Any) -> None:
    curves = {
        1: {"0": 0.1, "5": 0.5, "10": 0.92, "15": 0.95},
        2: {"0": 0.1, "5": 0.9, "10": 0.95, "15": 1.0},
        3: {"0": 0.1, "5": 0.3, "10": 0.6, "15": 0.7},
    }
    side = curve.summarise_side(curves, threshold=0.9, steps=15)
    assert side["steps"] == [0, 5, 10, 15]
    assert side["per_step"]["5"] == {"mean": 0.5667, "std": 0.3055, "min": 0.3, "max": 0.9}
    reached = side["steps_to_threshold"]
    assert reached["per_seed"] == {"1": 10, "2": 5, "3": None} and reached["reached"] == 2
    assert reached["mean"] == round((10 + 5 + 16) / 3, 4)
    assert side["final_reward"]["min"] == 0.7 and side["final_reward"]["max"] == 1.0
    other = curve.summarise_side({1: {"0": 0.1, "5": 0.95, "10": 1.0, "15": 1.0}}, threshold=0.9, steps=15)
    verdict = curve.verdict(trl=side, rlcore=other)
    assert verdict["rlcore_at_least_as_fast"] and verdict["steps_to_threshold_ranges_overlap"]


def test_bad_command_lines_give_one_line_errors() -> None:
    for args, message in (
        (["--task", "gsm8k"], "error: unknown --task 'gsm8k': use arith or arith-chain"),
        (["--kl", "k2"], "error: unknown --kl 'k2': use none or low_var_kl"),
        (["--seeds", "0"], "error: --seeds must be >= 1"),
        (["--first-seed", "0"], "error: --first-seed must be >= 1"),
        (["--threshold", "1.5"], "error: --threshold must be in (0, 1]"),
    ):
        result = subprocess.run(
            [sys.executable, str(BENCH / "vs_trl.py"), "--curve", *args], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines()[-1] == message
        assert result.stdout == ""


def test_plot_draws_both_sides(curve: Any, tmp_path: Path) -> None:
    side = curve.summarise_side({1: {"0": 0.1, "5": 0.8}, 2: {"0": 0.2, "5": 0.9}}, threshold=0.9, steps=5)
    png = curve.plot_curves({"trl": side, "rlcore": side}, 0.9, "title", tmp_path / "f" / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------ the arith-chain task
def test_arith_chain_problems_are_fixed_and_held_out() -> None:
    train, test = arith_chain._triples()
    assert (train, test) == arith_chain._triples()
    assert len(test) == arith_chain.N_TEST and not set(train) & set(test)
    assert all(0 <= c <= a + b for a, b, c in train + test)
    row = arith_chain._row(7, 5, 3, "test", 0)
    assert row["prompt"] == [{"role": "user", "content": "7+5-3="}] and row["reward_model"]["ground_truth"] == "9"


@pytest.mark.parametrize(
    ("response", "reward"),
    [("12-3=9", 1.0), ("9", 1.0), ("13-3=10", 0.0), ("12-3=", 0.0), ("", 0.0), ("12-3=9 ", 1.0), ("12-3=19", 0.0)],
)
def test_arith_chain_score(response: str, reward: float) -> None:
    assert arith_chain.score(arith_chain.DATA_SOURCE, response, "9") == reward


def test_arith_chain_teacher_is_right_about_a_fifth_of_the_time() -> None:
    """The warm start's teacher: each step right 40 %, one too large 45 %; whole chains right ~21 %."""
    rng = random.Random(0)
    train, _ = arith_chain._triples()
    chains = [(t, arith_chain.teacher_response(*t, rng)) for t in train[:4000]]
    right = sum(arith_chain.score("", text, str(a + b - c)) for (a, b, c), text in chains) / len(chains)
    assert 0.15 < right < 0.28
    assert arith_chain.chain_text(7, 5, 3) == "12-3=9"


def test_arith_chain_preset_is_a_valid_run() -> None:
    result = dry_run("--preset", "arith-chain-cpu")
    assert result.exit_code == 0, result.output
    assert "max_response_length: 10" in result.output and "arith-chain" in result.output


class TestArithChainPresetContract(PresetContract):
    component_name = "arith-chain-cpu"


def test_arith_chain_warm_start_leaves_room_for_rl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped warm-started model: greedy decoding is mostly wrong on the held-out problems, sampling is
    right more often — what GRPO improves on (measured on the 2-core machine: greedy 0.09, sampled 0.21)."""
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("RLCORE_CACHE", str(tmp_path))
    root = arith_chain.prepare_assets()
    assert root == tmp_path / f"arith-chain-{arith_chain.TASK_VERSION}"
    rows = pq.read_table(root / "test.parquet").to_pylist()
    assert len(rows) == arith_chain.N_TEST and len(pq.read_table(root / "train.parquet")) > 3000
    model_dir = shipped_model_dir(arith_chain.BASE_MODEL)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    texts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    answers = [r["reward_model"]["ground_truth"] for r in rows]

    def reward(**sampling: Any) -> float:
        """Mean score of the responses to the held-out prompts under ``sampling``."""
        n = sampling.pop("num_return_sequences", 1)
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=10, num_return_sequences=n, **sampling)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
        return sum(arith_chain.score("", t, answers[i // n]) for i, t in enumerate(texts)) / len(texts)

    greedy = reward(do_sample=False)
    torch.manual_seed(0)
    sampled = reward(do_sample=True, temperature=1.0, top_k=0, num_return_sequences=8)
    assert greedy < 0.3, f"the warm start is already right {greedy:.2f} of the time"
    assert sampled > greedy + 0.05, f"sampling ({sampled:.2f}) is not right more often than greedy ({greedy:.2f})"
