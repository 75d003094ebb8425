"""DAPO: the overlong penalty of the ``dapo`` reward manager, the ``dapo-groups`` filter, the config hook and
the preset (hand-computed), the reward-manager, batch-filter and preset contracts, and short real runs with
``--preset dapo`` that filter groups and regenerate."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from rlcore_plugin_dapo import hooks
from rlcore_plugin_dapo.config import OverlongBufferConfig
from rlcore_plugin_dapo.filters import keep_varied_groups
from rlcore_plugin_dapo.reward import DAPORewardManager
from rlcore_plugin_dapo.settings import overlong_buffer
from rlcore_testkit.contracts import BatchFilterContract, PresetContract, RewardManagerContract
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api import RewardModelConfig, extended_section
from rlcore.api.batch import Batch
from rlcore.config import ConfigError, load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins

# ----------------------------------------------------------------------------------------- reward manager
# Four responses, R = 10, valid lengths 2, 6, 8, 10; row 2 has two tool-output tokens (response_mask 0,
# attention 1) in the middle, which count towards its length. L_max = 10, L_buf = 4, factor 0.5:
# expected length 6, penalty min(-(L - 6) / 4 * 0.5, 0) = [0, 0, -0.25, -0.5].
LENGTHS = [2, 6, 8, 10]
PENALTIES = [0.0, 0.0, -0.25, -0.5]
BUFFER = {"enable": True, "len": 4, "penalty_factor": 0.5, "log": True, "max_response_length": 10}


def _reward_batch(tokenizer: Any) -> Batch:
    """The four responses above (prompts of two tokens), scored ``extra_info["value"]`` = i + 1."""
    token = tokenizer.encode("7", add_special_tokens=False)[0]
    n, width = len(LENGTHS), 10
    attention = torch.zeros(n, 2 + width, dtype=torch.long)
    attention[:, :2] = 1
    for i, length in enumerate(LENGTHS):
        attention[i, 2 : 2 + length] = 1
    response_mask = attention[:, 2:].clone()
    response_mask[2, 3:5] = 0
    return Batch.from_dict(
        {
            "prompts": torch.full((n, 2), token),
            "responses": torch.full((n, width), token),
            "attention_mask": attention,
            "response_mask": response_mask,
            "data_source": np.array(["t"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": "7"}] * n, dtype=object),
            "extra_info": np.array([{"value": i + 1.0} for i in range(n)], dtype=object),
        }
    )


def _value(data_source: str, solution_str: str, ground_truth: str, extra_info: dict) -> float:
    """The test scorer: each sample's ``extra_info["value"]``."""
    return extra_info["value"]


def _manager(tokenizer: Any, scorer: Callable[..., Any] = _value, **buffer: Any) -> DAPORewardManager:
    """A dapo manager with ``BUFFER`` (updated by ``buffer``) and ``scorer``."""
    kind = extended_section(RewardModelConfig, (OverlongBufferConfig,))
    section = kind(scorer_timeout=0, overlong_buffer=OverlongBufferConfig(**{**BUFFER, **buffer}))
    return DAPORewardManager(tokenizer, scorer, section)


def test_overlong_penalty_hand_computed(tiny_tokenizer: Any) -> None:
    result = _manager(tiny_tokenizer)(_reward_batch(tiny_tokenizer))
    expected = torch.zeros(4, 10)
    for i, (length, penalty) in enumerate(zip(LENGTHS, PENALTIES)):
        expected[i, length - 1] = i + 1.0 + penalty
    assert torch.allclose(result.token_level_scores, expected)
    assert result.extra_info["overlong_reward"] == pytest.approx(PENALTIES)
    assert result.extra_info["overlong"] == [False, False, True, True]
    assert result.extra_info["score"] == result.extra_info["acc"] == [1.0, 2.0, 3.0, 4.0]  # before the penalty
    assert result.metrics["reward/overlong_ratio"] == 0.5
    assert result.metrics["reward/overlong_reward_mean"] == pytest.approx(-0.1875)


def test_overlong_disabled_and_unlogged(tiny_tokenizer: Any) -> None:
    batch = _reward_batch(tiny_tokenizer)
    plain = _manager(tiny_tokenizer, enable=False)(batch)
    assert plain.token_level_scores.sum(-1).tolist() == [1.0, 2.0, 3.0, 4.0]
    quiet = _manager(tiny_tokenizer, log=False)(batch)
    assert "overlong_reward" not in quiet.extra_info and "reward/overlong_ratio" not in quiet.metrics
    assert quiet.token_level_scores.sum(-1).tolist() == pytest.approx([1.0, 2.0, 2.75, 3.5])


def test_dict_scores_keep_their_acc_and_failures_score_zero(tiny_tokenizer: Any) -> None:
    def scorer(data_source: str, solution_str: str, ground_truth: str, extra_info: dict) -> Any:
        """A dict scorer with ``acc`` that fails on the second sample."""
        if extra_info["value"] == 2.0:
            raise ValueError("broken sample")
        return {"score": extra_info["value"], "acc": extra_info["value"] > 3}

    result = _manager(tiny_tokenizer, scorer)(_reward_batch(tiny_tokenizer))
    assert result.extra_info["acc"] == [False, None, False, True]
    assert result.metrics["reward/scorer_errors"] == 1.0
    assert result.token_level_scores.sum(-1).tolist() == pytest.approx([1.0, 0.0, 2.75, 3.5])


def test_rm_scores_pass_through(tiny_tokenizer: Any) -> None:
    batch = _reward_batch(tiny_tokenizer)
    batch["rm_scores"] = torch.ones(4, 10)
    assert torch.equal(_manager(tiny_tokenizer)(batch).token_level_scores, torch.ones(4, 10))


def test_overlong_buffer_settings() -> None:
    def section(**kw: Any) -> OverlongBufferConfig:
        """An ``overlong_buffer`` section: ``BUFFER`` updated by ``kw``."""
        return OverlongBufferConfig(**{**BUFFER, **kw})

    assert overlong_buffer(section()).expected_length == 6
    assert overlong_buffer(section(len=None, max_response_length=20480)).length == 4096  # the paper's buffer
    assert overlong_buffer(section(len=None, max_response_length=3)).length == 1
    for bad in (0, 11):
        with pytest.raises(ConfigError, match="overlong_buffer.len"):
            overlong_buffer(section(len=bad))
    assert overlong_buffer(section(enable=False, len=0)).enable is False  # unchecked when disabled


# --------------------------------------------------------------------------------------------- filter
def _filter_batch() -> Batch:
    """Groups: p0 varied [1, 0, 1], p1 constant [1, 1, 1], p2 a singleton [0], p3 varied only by KL [0.5, 0.5]."""
    uids = ["p0", "p1", "p0", "p1", "p2", "p0", "p1", "p3", "p3"]
    scores = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5, 0.5]
    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.5, 0.4]
    token_scores = torch.zeros(len(uids), 3)
    token_scores[:, -1] = torch.tensor(scores)
    token_rewards = torch.zeros(len(uids), 3)
    token_rewards[:, -1] = torch.tensor(rewards)
    return Batch.from_dict(
        {
            "responses": torch.arange(len(uids) * 3).view(-1, 3),
            "token_level_scores": token_scores,
            "token_level_rewards": token_rewards,
            "uid": np.array(uids, dtype=object),
            "acc": np.array([True, True, False, True, False, True, True, True, True], dtype=object),
        }
    )


def _filter(metric: str, batch: Batch | None = None) -> tuple[Batch, dict[str, float]]:
    """Run the filter with ``algorithm.filter_groups.metric=metric`` on ``batch`` (default: the example)."""
    config = OmegaConf.create({"algorithm": {"filter_groups": {"metric": metric}}})
    return keep_varied_groups(batch or _filter_batch(), config)


@pytest.mark.parametrize(
    ("metric", "kept_uids"),
    [
        ("seq_reward", ["p0", "p0", "p2", "p0"]),
        ("acc", ["p0", "p0", "p2", "p0"]),
        ("seq_final_reward", ["p0", "p0", "p2", "p0", "p3", "p3"]),
    ],
)
def test_filter_keeps_varied_groups_and_singletons(metric: str, kept_uids: list[str]) -> None:
    kept, metrics = _filter(metric)
    assert kept["uid"].tolist() == kept_uids
    assert metrics == {
        "batch_filter/dapo/kept_groups": float(len(set(kept_uids))),
        "batch_filter/dapo/total_groups": 4.0,
    }


def test_filter_seq_final_reward_falls_back_to_scores() -> None:
    batch = _filter_batch()
    batch.pop("token_level_rewards")
    assert _filter("seq_final_reward", batch)[0]["uid"].tolist() == ["p0", "p0", "p2", "p0"]


def test_filter_floating_point_noise_is_not_variation() -> None:
    """Constant groups of 0.1 and 0.7 are dropped although numpy's std of them is not 0 (verl keeps them)."""
    assert np.std([0.1] * 3) > 0 and np.std([0.7] * 3) > 0
    batch = _filter_batch()
    batch["partial"] = np.array([0.1, 0.7, 0.1, 0.7, 0.0, 0.1, 0.7, 0.5, 0.6], dtype=object)
    assert _filter("partial", batch)[0]["uid"].tolist() == ["p2", "p3", "p3"]


def test_filter_unknown_metric() -> None:
    with pytest.raises(RLCoreError, match="metric='score'.*no per-sample 'score'"):
        _filter("score")


# --------------------------------------------------------------------------------------- config and hook
def _resolved(*overrides: str, presets: tuple[str, ...] = ()) -> Any:
    """The config after ``rlcore run``'s config hook."""
    config = load_config(overrides=overrides, presets=presets)
    load_plugins().hook.on_config_resolved(config=config)
    return config


def test_config_defaults_are_verls_keys() -> None:
    cfg = load_config()
    assert OmegaConf.to_container(cfg.algorithm.filter_groups) == {
        "enable": False,
        "metric": "seq_reward",
        "max_num_gen_batches": None,
    }
    assert cfg.reward_model.overlong_buffer.enable is False
    assert cfg.reward_model.overlong_buffer.max_response_length == cfg.data.max_response_length
    assert load_config(overrides=["data.max_response_length=64"]).reward_model.overlong_buffer.max_response_length == 64


def test_filter_groups_enable_adds_the_filter_and_the_round_limit() -> None:
    cfg = _resolved("algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=7")
    assert list(cfg.algorithm.batch_filters) == ["dapo-groups"]
    assert cfg.algorithm.max_num_gen_batches == 7
    hooks.on_config_resolved(cfg)  # idempotent
    assert list(cfg.algorithm.batch_filters) == ["dapo-groups"]
    kept = _resolved("algorithm.filter_groups.enable=true", "algorithm.max_num_gen_batches=3")
    assert kept.algorithm.max_num_gen_batches == 3  # filter_groups.max_num_gen_batches null: unchanged
    off = _resolved("algorithm.filter_groups.max_num_gen_batches=7")
    assert list(off.algorithm.batch_filters) == [] and off.algorithm.max_num_gen_batches == 10


def test_overlong_buffer_needs_the_dapo_manager() -> None:
    with pytest.raises(ConfigError, match="reward_model.reward_manager=dapo"):
        _resolved("reward_model.overlong_buffer.enable=true")
    cfg = _resolved(
        "reward_model.overlong_buffer.enable=true", "reward_model.reward_manager=dapo", "data.max_response_length=100"
    )
    assert cfg.reward_model.overlong_buffer.len == 20  # the effective buffer is recorded in the run's config
    with pytest.raises(ConfigError, match="between 1 and the maximum response length 100"):
        _resolved(
            "reward_model.overlong_buffer.enable=true",
            "reward_model.reward_manager=dapo",
            "data.max_response_length=100",
            "reward_model.overlong_buffer.len=128",
        )


def test_dapo_preset() -> None:
    cfg = _resolved(presets=("dapo",))
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert actor.loss_agg_mode == "token-mean" and actor.use_kl_loss is False
    assert actor.policy_loss.loss_mode == "vanilla"  # clip-higher is the vanilla loss with ε_high = 0.28
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.use_kl_in_reward is False
    assert list(cfg.algorithm.batch_filters) == ["dapo-groups"]
    assert cfg.reward_model.reward_manager == "dapo"
    assert cfg.reward_model.overlong_buffer.enable is True and cfg.reward_model.overlong_buffer.penalty_factor == 1.0


def test_registration_and_listing() -> None:
    registry = load_plugins().registry
    for kind, name in (("reward_manager", "dapo"), ("batch_filter", "dapo-groups"), ("preset", "dapo")):
        assert registry.get(kind, name).dist == "rlcore-plugin-dapo"
    out = subprocess.run(
        [sys.executable, "-m", "rlcore", "plugins", "--kind", "preset"], check=True, capture_output=True, text=True
    ).stdout
    assert "preset:dapo" in out


def test_hooks_module_does_not_import_torch() -> None:
    code = "import sys, rlcore_plugin_dapo.hooks; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------------------------------ contracts
class TestDAPORewardManagerContract(RewardManagerContract):
    """The dapo manager passes the reward-manager contract (no penalty with the buffer off)."""

    component_name = "dapo"


class TestDAPORewardManagerBufferContract(RewardManagerContract):
    """And with the buffer on: the contract's short responses stay below L_max − L_buf, so scores are unchanged."""

    component_name = "dapo"
    config_overrides = {"overlong_buffer.enable": True, "overlong_buffer.len": 4, "overlong_buffer.penalty_factor": 1.0}


class TestDAPOFilterContract(BatchFilterContract):
    """The dapo-groups filter passes the batch-filter contract."""

    component_name = "dapo-groups"


class TestDAPOFilterFinalRewardContract(BatchFilterContract):
    """Also with ``metric=seq_final_reward``."""

    component_name = "dapo-groups"
    config_overrides = ["algorithm.filter_groups.metric=seq_final_reward"]


class TestDAPOPresetContract(PresetContract):
    """The ``dapo`` preset passes the preset contract."""

    component_name = "dapo"


# ---------------------------------------------------------------------------------------- real runs
def test_dapo_preset_filters_and_regenerates(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``--preset dapo`` on the tiny task, two prompts per generation round for a batch of four: every step
    needs at least two rounds, and groups whose shaped reward is constant are dropped."""
    task = make_tiny_task(tmp_path / "task")
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "data.gen_batch_size=2",
        "algorithm.filter_groups.max_num_gen_batches=30",
        "reward_model.overlong_buffer.log=true",
        presets=("dapo",),
    )
    assert last["training/global_step"] == 2
    assert last["batch_filter/gen_rounds"] >= 2
    assert last["batch_filter/kept_prompts"] >= 4
    assert last["batch_filter/dapo/total_groups"] == 2.0
    assert 0 <= last["batch_filter/dapo/kept_groups"] <= 2
    assert "reward/overlong_ratio" in last
    assert math.isfinite(last["actor/pg_loss"])
    config = OmegaConf.load(run_dir / "config.yaml")
    assert list(config.algorithm.batch_filters) == ["dapo-groups"] and config.algorithm.max_num_gen_batches == 30


def test_dapo_filters_on_the_reward_managers_acc(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``filter_groups.metric=acc`` reads the reward manager's per-sample extra info, which the controller
    keeps in the batch."""
    task = make_tiny_task(tmp_path / "task")
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.filter_groups.metric=acc",
        "algorithm.filter_groups.max_num_gen_batches=30",
        presets=("dapo",),
    )
    assert last["training/global_step"] == 2
    assert last["batch_filter/kept_prompts"] >= 4


def test_dapo_round_limit_is_a_clear_error(tmp_path: Path, tiny_model_dir: Path) -> None:
    """One round of two prompts can never fill a batch of four: the controller stops with the limit's key."""
    task = make_tiny_task(tmp_path / "task")
    with pytest.raises(RLCoreError, match=r"after 1 generation rounds \(algorithm.max_num_gen_batches=1\)"):
        tiny_run(
            tmp_path,
            tiny_model_dir,
            task,
            "data.gen_batch_size=2",
            "algorithm.filter_groups.max_num_gen_batches=1",
            presets=("dapo",),
        )


def test_close_ends_the_scorer_processes(tiny_tokenizer: Any) -> None:
    """The controller closes the reward manager when a run ends: the naive manager's scorer processes stop (left
    running, a process exiting waits for them)."""
    import multiprocessing

    kind = extended_section(RewardModelConfig, (OverlongBufferConfig,))
    section = kind(scorer_timeout=30, scorer_workers=2, overlong_buffer=OverlongBufferConfig(**BUFFER))
    manager = DAPORewardManager(tiny_tokenizer, _value, section)
    manager(_reward_batch(tiny_tokenizer))
    scorers = [p for p in multiprocessing.active_children() if p.name == "rlcore-scorer"]
    assert scorers, "scoring with a time limit runs in scorer processes"
    manager.close()
    assert not any(p.is_alive() for p in scorers)
