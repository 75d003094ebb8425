"""Tests of the reward managers, safe scoring and scorer/manager construction (with rlcore-plugin-tasks' GSM8K and
MATH scorers; the scorers' own tests are in plugins/tasks/tests/test_verl_scorers.py)."""

from __future__ import annotations

import logging
import time

import pytest
from omegaconf import OmegaConf
from rlcore_plugin_tasks.scorers import gsm8k
from rlcore_testkit.contracts.rewards import (
    RESPONSE_LENGTH,
    RewardManagerContract,
    make_reward_batch,
)

from rlcore.config.schema import CustomRewardFunctionConfig, Sections
from rlcore.config.sections.reward_model import RewardModelConfig
from rlcore.errors import RLCoreError
from rlcore.reward import RewardError, RewardResult
from rlcore.reward.managers import BatchRewardManager, NaiveRewardManager, to_score
from rlcore.reward.scoring import RegistryScorer, build_reward_manager, build_scorer


def run_config(**overrides):
    """rlcore's default config with dotted-key overrides."""
    from rlcore.config import default_config
    from rlcore.plugins import load_plugins

    config = default_config(load_plugins())
    for key, value in overrides.items():
        OmegaConf.update(config, key, value, merge=True)
    return config


# ------------------------------------------------------------------ managers


GSM8K_RESPONSES = ["48 + 24 = 72\n#### 72", "#### 71", "", "I do not know"]


def test_naive_manager_with_gsm8k(tiny_tokenizer, plugin_manager):
    batch, lengths = make_reward_batch(
        tiny_tokenizer, GSM8K_RESPONSES, data_source="openai/gsm8k", ground_truths=["72", "72", "72", "72"]
    )
    result = NaiveRewardManager(
        tiny_tokenizer, RegistryScorer(plugin_manager.registry), RewardModelConfig(scorer_timeout=5)
    )(batch)
    assert isinstance(result, RewardResult)
    assert result.token_level_scores.shape == (4, RESPONSE_LENGTH)
    assert result.token_level_scores[0, lengths[0] - 1] == 1.0
    assert result.token_level_scores.sum().item() == 1.0
    assert result.metrics == {
        "reward/scorer_errors": 0.0,
        "reward/scorer_timeouts": 0.0,
        "reward/scorer_nan": 0.0,
        "reward/ground_truth_nonstring": 0.0,
    }


def test_batch_manager_single_call(tiny_tokenizer):
    batch, lengths = make_reward_batch(tiny_tokenizer)

    def batched(data_sources, solution_strs, ground_truths, extra_infos, scale):
        return [
            {"score": scale * info["value"], "length": len(s), "call_size": len(solution_strs)}
            for s, info in zip(solution_strs, extra_infos)
        ]

    result = BatchRewardManager(tiny_tokenizer, batched, RewardModelConfig(reward_kwargs={"scale": 2.0}))(batch)
    assert result.extra_info["call_size"] == [4, 4, 4, 4], "one call for the whole batch"
    assert result.token_level_scores.sum(-1).tolist() == [3.0, 5.0, 7.0, 9.0]
    assert result.extra_info["length"][3] == 0


def test_valid_length_from_response_mask_without_prompts(tiny_tokenizer):
    batch, lengths = make_reward_batch(tiny_tokenizer)
    for key in ("prompts", "attention_mask"):
        batch.pop([key])
    result = NaiveRewardManager(tiny_tokenizer, lambda **kw: 1.0, RewardModelConfig())(batch)
    assert [int(row.nonzero()[0]) for row in result.token_level_scores] == [max(n - 1, 0) for n in lengths]


def test_rm_scores_pass_through(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer)
    import torch

    batch["rm_scores"] = torch.ones(4, RESPONSE_LENGTH)
    assert (
        NaiveRewardManager(tiny_tokenizer, None, RewardModelConfig())(batch).token_level_scores.sum()
        == 4 * RESPONSE_LENGTH
    )


def test_missing_batch_key_is_named(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer)
    batch.pop(["reward_model"])
    with pytest.raises(RewardError, match="needs batch key 'reward_model'"):
        NaiveRewardManager(tiny_tokenizer, lambda **kw: 1.0, RewardModelConfig())(batch)


def test_num_examine_prints_per_data_source(tiny_tokenizer, capsys):
    batch, _ = make_reward_batch(tiny_tokenizer)
    NaiveRewardManager(tiny_tokenizer, lambda **kw: 0.5, RewardModelConfig(num_examine=1))(batch)
    out = capsys.readouterr().out
    assert out.count("[reward] data_source=contract") == 1
    assert "[response] the answer is 12" in out and "[ground_truth] 0" in out and "[score] 0.5" in out


# ------------------------------------------------------------------ safe scoring


def misbehaving(data_source, solution_str, ground_truth, extra_info=None):
    """Sample 1 raises, sample 2 returns NaN, sample 3 hangs past the timeout; sample 0 is fine."""
    if ground_truth == "1":
        raise ZeroDivisionError("bad sample")
    if ground_truth == "2":
        return float("nan")
    if ground_truth == "3":
        time.sleep(60)
    return 1.0


def batched_misbehaving(data_sources, solution_strs, ground_truths, extra_infos):
    return [misbehaving(d, s, g, e) for d, s, g, e in zip(data_sources, solution_strs, ground_truths, extra_infos)]


@pytest.mark.parametrize(
    "manager_cls, scorer", [(NaiveRewardManager, misbehaving), (BatchRewardManager, batched_misbehaving)]
)
def test_failures_score_zero_and_are_counted(manager_cls, scorer, tiny_tokenizer, caplog):
    batch, lengths = make_reward_batch(tiny_tokenizer, ["a", "b", "c", "d", "e"])
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="rlcore.reward.managers"):
        result = manager_cls(tiny_tokenizer, scorer, RewardModelConfig(scorer_timeout=0.2))(batch)
    assert time.monotonic() - start < 20, "the hung sample was not cut at its timeout"
    assert result.token_level_scores.sum(-1).tolist() == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert result.metrics == {"reward/scorer_errors": 1.0, "reward/scorer_timeouts": 1.0, "reward/scorer_nan": 1.0}
    per_kind = [r.getMessage() for r in caplog.records if "samples score 0" in r.getMessage()]
    assert len(per_kind) == 3
    assert any("sample 1, data_source 'contract': ZeroDivisionError: bad sample" in m for m in per_kind)
    assert any("timed out" in m and "sample 3" in m for m in per_kind)
    assert any("not a finite number" in m and "sample 2" in m for m in per_kind)


@pytest.mark.parametrize(
    "value, expected",
    [
        (1, 1.0),
        (True, 1.0),
        ({"score": 0.5, "acc": 1}, 0.5),
        ({"acc": 1}, None),
        ("1.0", None),
        (float("inf"), None),
        (None, None),
        (__import__("numpy").float32(0.25), 0.25),
    ],
)
def test_to_score(value, expected):
    assert to_score(value)[0] == expected


@pytest.mark.parametrize("kind", ["error", "nan", "timeout"])
def test_fail_fast_raises(kind, tiny_tokenizer):
    truth = {"error": "1", "nan": "2", "timeout": "3"}[kind]
    batch, _ = make_reward_batch(tiny_tokenizer, ["x"], ground_truths=[truth])
    manager = NaiveRewardManager(
        tiny_tokenizer, misbehaving, RewardModelConfig(scorer_timeout=0.2, scorer_fail_fast=True)
    )
    with pytest.raises(RewardError, match="sample 0, data_source 'contract'.*scorer_fail_fast=true"):
        manager(batch)


def test_batch_fail_fast_raises_on_the_whole_call(tiny_tokenizer):
    batch, _ = make_reward_batch(tiny_tokenizer, ["x", "y"])
    manager = BatchRewardManager(tiny_tokenizer, batched_misbehaving, RewardModelConfig(scorer_fail_fast=True))
    with pytest.raises(RewardError, match="batch reward scorer raised ZeroDivisionError"):
        manager(batch)


# ------------------------------------------------------------------ build_scorer / build_reward_manager


def reward_manager(config, tokenizer, manager):
    """The run's reward manager, its class resolved from ``reward_model.reward_manager`` as ``rlcore run`` does."""
    cls = manager.registry.load("reward_manager", config.reward_model.reward_manager)
    return build_reward_manager(Sections.from_tree(config), config.reward_model, tokenizer, cls, manager.registry)


def custom_section(config):
    """The ``custom_reward_function`` section of the run config ``config``."""
    return CustomRewardFunctionConfig.from_tree(config, "custom_reward_function")


def test_unknown_data_source_is_an_error_listing_known_scorers(tiny_tokenizer, plugin_manager):
    batch, _ = make_reward_batch(tiny_tokenizer, ["#### 1"], data_source="my/unknown-set")
    manager = reward_manager(run_config(), tiny_tokenizer, plugin_manager)
    assert isinstance(manager, NaiveRewardManager)
    with pytest.raises(RLCoreError, match=r"unknown reward_scorer 'my/unknown-set'.*openai/gsm8k"):
        manager(batch)


def test_registry_scorer_dispatches_and_caches(plugin_manager):
    scorer = build_scorer(custom_section(run_config()), plugin_manager.registry)
    assert isinstance(scorer, RegistryScorer)
    assert scorer("gsm8k", "#### 3", "3") == 1.0
    assert scorer("lighteval/MATH", "\\boxed{3}", "3") == 1.0
    assert scorer.resolve("gsm8k") is gsm8k.score


CUSTOM = '''
"""A custom reward file."""


def length_bonus(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    """1 + bonus when the ground truth is in the response."""
    return float(ground_truth in solution_str) + bonus


def batched(data_sources, solution_strs, ground_truths, extra_infos, weight=1.0, offset=0.0):
    """Batched variant."""
    return [weight * float(g in s) + offset for s, g in zip(solution_strs, ground_truths)]


async def async_score(data_source, solution_str, ground_truth, extra_info=None):
    """An async scorer."""
    return 0.25


NOT_CALLABLE = 3
'''


@pytest.fixture
def custom_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(CUSTOM)
    return str(path)


def test_custom_reward_function_with_kwargs(custom_file, tiny_tokenizer, plugin_manager):
    config = run_config(
        **{
            "custom_reward_function.path": custom_file,
            "custom_reward_function.name": "length_bonus",
            "custom_reward_function.reward_kwargs": {"bonus": 0.5},
        }
    )
    scorer = build_scorer(custom_section(config), plugin_manager.registry)
    assert scorer("anything", "it is 12", "12") == 1.5
    batch, lengths = make_reward_batch(
        tiny_tokenizer, ["it is 12", "nope"], data_source="unregistered/source", ground_truths=["12", "12"]
    )
    result = reward_manager(config, tiny_tokenizer, plugin_manager)(batch)
    assert result.token_level_scores[0, lengths[0] - 1] == 1.5
    assert result.token_level_scores[1, lengths[1] - 1] == 0.5


def test_custom_batched_function_with_batch_manager(custom_file, tiny_tokenizer, plugin_manager):
    config = run_config(
        **{
            "custom_reward_function.path": custom_file,
            "custom_reward_function.name": "batched",
            "custom_reward_function.reward_kwargs": {"offset": 0.25},
            "reward_model.reward_manager": "batch",
            "reward_model.reward_kwargs": {"weight": 2.0},
        }
    )
    manager = reward_manager(config, tiny_tokenizer, plugin_manager)
    assert isinstance(manager, BatchRewardManager)
    batch, _ = make_reward_batch(tiny_tokenizer, ["it is 0", "nope"])
    assert manager(batch).token_level_scores.sum(-1).tolist() == [2.25, 0.25]


def test_batch_manager_needs_a_custom_function(tiny_tokenizer, plugin_manager):
    with pytest.raises(RewardError, match="custom_reward_function.path"):
        reward_manager(run_config(**{"reward_model.reward_manager": "batch"}), tiny_tokenizer, plugin_manager)


def test_async_custom_function(custom_file, plugin_manager):
    config = run_config(**{"custom_reward_function.path": custom_file, "custom_reward_function.name": "async_score"})
    assert build_scorer(custom_section(config), plugin_manager.registry)("x", "y", "z") == 0.25


@pytest.mark.parametrize(
    "path_suffix, name, match",
    [
        ("", "missing_fn", r"my_reward.py' defines no 'missing_fn'.*length_bonus"),
        ("", "NOT_CALLABLE", r"'NOT_CALLABLE' in .* is a int, not a function"),
        (".nope", "x", r"custom_reward_function.path='.*my_reward.py.nope': file does not exist"),
    ],
)
def test_custom_reward_function_errors(custom_file, path_suffix, name, match, plugin_manager):
    config = run_config(
        **{"custom_reward_function.path": custom_file + path_suffix, "custom_reward_function.name": name}
    )
    with pytest.raises(RewardError, match=match):
        build_scorer(custom_section(config), plugin_manager.registry)


def test_custom_file_that_fails_to_import(tmp_path, plugin_manager):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('boom at import')\n")
    config = run_config(**{"custom_reward_function.path": str(path)})
    with pytest.raises(RewardError, match=r"broken.py': importing the file raised RuntimeError: boom at import"):
        build_scorer(custom_section(config), plugin_manager.registry)


# ------------------------------------------------------------------ contracts


class TestNaiveManagerContract(RewardManagerContract):
    component_name = "naive"


class TestBatchManagerContract(RewardManagerContract):
    component_name = "batch"


class TestPrimeManagerContract(RewardManagerContract):
    component_name = "prime"


def hang_on_empty(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> float:
    """A scorer that never returns for an empty response (runs in the scorer processes)."""
    if not solution_str:
        time.sleep(60)
    return gsm8k.compute_score(solution_str, ground_truth)


def test_prime_manager_scores_in_parallel_with_a_timeout_and_adds_acc(tiny_tokenizer):
    """verl's ``prime``: a scorer that hangs scores 0 after the per-sample timeout, the others are scored,
    and the scores come back as the ``acc`` column too."""
    from rlcore.plugins import get_component

    batch, lengths = make_reward_batch(
        tiny_tokenizer, GSM8K_RESPONSES, data_source="openai/gsm8k", ground_truths=["72", "72", "72", "72"]
    )
    manager = get_component("reward_manager", "prime")(
        tiny_tokenizer, hang_on_empty, RewardModelConfig(scorer_timeout=2)
    )
    try:
        result = manager(batch)
    finally:
        manager.close()
    assert result.tensors["acc"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert result.token_level_scores[0, lengths[0] - 1] == 1.0
    assert result.metrics["reward/scorer_timeouts"] == 1.0
