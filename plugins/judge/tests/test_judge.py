"""The LLM-judge reward manager grades a batch with a real rollout engine (HF, and vLLM where it imports).

The judge is a tiny Qwen2 model trained here for a few seconds to answer every grading prompt with
``Score: 7``, so its verdicts are known: every response scores 0.7.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from rlcore_plugin_judge.judge import DEFAULT_TEMPLATE, JUDGE_ENGINE, JudgeRewardManager, parse_verdict
from rlcore_testkit.config import contract_section
from rlcore_testkit.tiny import build_model, build_tokenizer

from rlcore.api import Batch, RewardError, RewardModelConfig, RLCoreError, RolloutConfig, default_section

VERDICT = "Score: 7"


def grading_prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = "the sum of apples total answer is more less how many".split()
    return [
        DEFAULT_TEMPLATE.format(
            prompt=f"{rng.randint(1, 50)}+{rng.randint(1, 50)}=",
            response=" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))),
            ground_truth=str(rng.randint(1, 99)),
            max_score="10",
        )
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny judge that answers ``Score: 7`` (trained on rendered grading prompts)."""
    path = tmp_path_factory.mktemp("judge")
    tokenizer = build_tokenizer([*grading_prompts(50, 0), VERDICT])
    model = build_model(tokenizer)
    rows = []
    for text in grading_prompts(16, 1):
        chat = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        prompt = tokenizer(chat, add_special_tokens=False)["input_ids"]
        answer = tokenizer(VERDICT, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append((prompt, answer))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        optimizer.zero_grad()
        for prompt, answer in rows:
            ids = torch.tensor([prompt + answer])
            labels = torch.tensor([[-100] * len(prompt) + answer])
            (model(input_ids=ids, labels=labels).loss / len(rows)).backward()
        optimizer.step()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def response_batch(tokenizer: Any, responses: list[str]) -> Batch:
    """A batch of responses to ``1+2=`` (policy side), as the rollout returns it."""
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in responses]
    width = max(len(i) for i in ids)
    prompt = tokenizer("1+2=", add_special_tokens=False)["input_ids"]
    out = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, tokens in enumerate(ids):
        out[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    prompts = torch.tensor([prompt] * len(ids))
    batch = Batch.from_dict(
        {
            "prompts": prompts,
            "responses": out,
            "response_mask": mask,
            "attention_mask": torch.cat([torch.ones_like(prompts), mask], dim=1),
        }
    )
    batch["data_source"] = np.array(["tiny"] * len(ids), dtype=object)
    batch["reward_model"] = np.array([{"ground_truth": "3"}] * len(ids), dtype=object)
    return batch


def reward_section(**keys: Any) -> RewardModelConfig:
    """The typed ``reward_model`` section of the default config with ``keys`` (below ``reward_model``) set."""
    return contract_section(RewardModelConfig, {f"reward_model.{key}": value for key, value in keys.items()})


def judge(judge_dir: Path, tokenizer: Any, **section: Any) -> JudgeRewardManager:
    config = reward_section(
        **{
            "model.path": str(judge_dir),
            "rollout.name": "hf",
            "rollout.prompt_length": 512,
            "rollout.response_length": 8,
        },
        **section,
    )
    return JudgeRewardManager(tokenizer, None, config)


RESPONSES = ["3", "the answer is 4", "sum"]


def check_batch_graded(manager: JudgeRewardManager, tokenizer: Any) -> None:
    batch = response_batch(tokenizer, RESPONSES)
    try:
        result = manager(batch)
    finally:
        manager.close()
    assert result.extra_info["judge_verdict"] == [VERDICT] * 3
    scores = result.token_level_scores
    assert scores.sum(-1).tolist() == pytest.approx([0.7] * 3)
    last = batch["response_mask"].sum(-1) - 1
    assert all(scores[i, int(last[i])] == pytest.approx(0.7) for i in range(3)), "on the last valid token"
    assert result.metrics["reward/scorer_nan"] == 0 and result.metrics["reward/scorer_errors"] == 0


def test_the_judge_grades_a_batch_with_hf(judge_dir: Path, tiny_tokenizer: Any) -> None:
    check_batch_graded(judge(judge_dir, tiny_tokenizer), tiny_tokenizer)


def test_the_judge_grades_a_batch_with_vllm(judge_dir: Path, tiny_tokenizer: Any) -> None:
    from rlcore_plugin_vllm.engine import import_vllm

    try:
        import_vllm()
    except RLCoreError as exc:
        pytest.skip(str(exc))
    rollout = {"name": "vllm", "prompt_length": 512, "response_length": 8, "vllm": {"cpu_kv_cache_gib": 1}}
    check_batch_graded(judge(judge_dir, tiny_tokenizer, rollout=rollout), tiny_tokenizer)


def test_the_judge_engine_gets_the_rollout_defaults_then_its_own_values(judge_dir: Path, tiny_tokenizer: Any) -> None:
    """The judge's engine is built with a whole typed rollout section: the defaults, the judge's greedy/eager/real
    weights, then ``reward_model.rollout`` (its keys with their own defaults: one GPU, half its memory); keys
    ``reward_model.rollout`` does not have are the run's defaults (not the engine's own fallbacks: unchunked on CPU
    before)."""
    manager = judge(judge_dir, tiny_tokenizer)
    manager._start()
    judge_keys = {"name": "hf", "prompt_length": 512, "response_length": 8}
    judge_keys |= {"gpu_memory_utilization": 0.5, "tensor_model_parallel_size": 1}
    expected = default_section(RolloutConfig, **JUDGE_ENGINE, **judge_keys)
    assert manager.engine.config == expected and expected.load_format == "auto" and expected.enforce_eager
    assert manager.engine.token_budget == default_section(RolloutConfig).max_num_batched_tokens


def test_a_verdict_without_a_score_scores_zero_and_is_counted(judge_dir: Path, tiny_tokenizer: Any) -> None:
    manager = judge(judge_dir, tiny_tokenizer, judge={"verdict_pattern": r"Grade: (\d+)"})
    try:
        result = manager(response_batch(tiny_tokenizer, RESPONSES))
    finally:
        manager.close()
    assert result.token_level_scores.abs().sum() == 0
    assert result.metrics["reward/scorer_nan"] == 3
    strict = judge(judge_dir, tiny_tokenizer, judge={"verdict_pattern": r"Grade: (\d+)"}, scorer_fail_fast=True)
    try:
        with pytest.raises(RewardError, match=r"gave no score in its verdict for 3 of 3 sample\(s\).*fail_fast"):
            strict(response_batch(tiny_tokenizer, RESPONSES))
    finally:
        strict.close()


def test_parse_verdict() -> None:
    assert parse_verdict("Score: 7", None) == 7.0
    assert parse_verdict("between 2 and 8.5", None) == 8.5
    assert parse_verdict("no number", None) is None
    import re

    assert parse_verdict("Score: 3 ... Score: 9", re.compile(r"Score: (\d+)")) == 9.0


def test_bad_judge_settings_are_named(tiny_tokenizer: Any) -> None:
    with pytest.raises(RLCoreError, match="reward_manager=judge needs reward_model.model.path"):
        JudgeRewardManager(tiny_tokenizer, None, reward_section(**{"model.path": None}))
    with pytest.raises(RLCoreError, match="verdict_pattern=.* needs a group: the score"):
        section = reward_section(**{"model.path": "x", "judge.verdict_pattern": r"Score: \d"})
        JudgeRewardManager(tiny_tokenizer, None, section)
