"""PRIME: hand-computed advantages and implicit rewards, the PRM's online training on a fixed batch of the
default task (its loss falls), the registration and preset, and a short real run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_prime.advantage import compute_prime_advantage, leave_one_out
from rlcore_plugin_prime.config import PrimeAlgorithmConfig
from rlcore_plugin_prime.worker import PrimeRewardModelWorker, implicit_rewards
from rlcore_testkit.runs import make_tiny_task, tiny_run

from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.plugins import load_plugins
from rlcore.tracking.sinks import read_metrics

UIDS = np.array(["a", "a", "b", "b"], dtype=object)
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])


def test_leave_one_out_hand_computed() -> None:
    rewards = torch.tensor([[1.0, 3.0, 9.0], [0.0, 0.0, 3.0], [4.0, 9.0, 9.0], [2.0, 2.0, 9.0]])
    out = leave_one_out(rewards, MASK.bool(), UIDS)
    # group a: m = [2, 1], Σ = 3 -> (2r - 3) / 1; group b: m = [4, 2], Σ = 6 -> (2r - 6) / 1
    expected = torch.tensor([[-1.0, 3.0, 0.0], [-3.0, -3.0, 3.0], [2.0, 0.0, 0.0], [-2.0, -2.0, 0.0]])
    assert torch.allclose(out, expected)


def test_advantage_combines_the_implicit_and_the_outcome_rewards() -> None:
    rm = torch.tensor([[0.1, 0.2, 0.0], [0.0, 0.3, 0.0], [0.5, 0.0, 0.0], [0.1, 0.1, 0.0]])
    acc = torch.tensor([1.0, 0.0, 1.0, 1.0])
    config = PrimeAlgorithmConfig(reward_dpo_coef=2.0, reward_gt_coef=3.0)
    adv, returns = compute_prime_advantage(
        token_level_rewards=torch.zeros(4, 3), response_mask=MASK, index=UIDS, config=config, rm_scores=rm, acc=acc
    )
    # implicit: group a means [0.15, 0.1] -> 2r - 0.25; group b means [0.5, 0.1] -> 2r - 0.6
    implicit = torch.tensor([[-0.05, 0.15, 0.0], [-0.25, 0.35, -0.25], [0.4, 0.0, 0.0], [-0.4, -0.4, 0.0]])
    # outcome on the last valid token: a: [1, -1], b: [0, 0]
    outcome = torch.zeros(4, 3)
    outcome[0, 1], outcome[1, 2] = 1.0, -1.0
    rewards = (2.0 * implicit + 3.0 * outcome) * MASK
    expected_returns = rewards.flip(-1).cumsum(-1).flip(-1) * MASK
    assert torch.allclose(returns, expected_returns, atol=1e-6)
    valid = returns[MASK.bool()]
    whitened = (valid - valid.mean()) / (valid.var() + 1e-8).sqrt()
    assert torch.allclose(adv[MASK.bool()], whitened, atol=1e-5)
    assert torch.all(adv[~MASK.bool()] == 0)


def test_implicit_rewards_granularity_and_norm() -> None:
    q = torch.tensor([[1.0, -2.0, 5.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert torch.allclose(
        implicit_rewards(q, mask, 0.5, "token", "none"), torch.tensor([[0.5, -1.0, 0.0], [2.0, 0, 0]])
    )
    assert torch.allclose(
        implicit_rewards(q, mask, 0.5, "whole", "none"), torch.tensor([[0.0, -0.5, 0.0], [2.0, 0, 0]])
    )
    # batch_norm: divided by the largest |reward-to-go| (2.0 here)
    normed = implicit_rewards(q, mask, 0.5, "token", "batch_norm")
    assert torch.allclose(normed, torch.tensor([[0.25, -0.5, 0.0], [1.0, 0, 0]]), atol=1e-6)


def labelled_batch(tokenizer) -> Batch:
    """The default task's prompts (``a+b=``) with a right and an off-by-one answer each, labelled by the
    default task's scorer (``acc``)."""
    from rlcore_plugin_tasks.arith import score

    pairs = [(3, 5), (12, 7), (9, 9), (1, 16)]
    prompts, answers, labels = [], [], []
    for a, b in pairs:
        for answer in (a + b, a + b + 1):
            chat = [{"role": "user", "content": f"{a}+{b}="}]
            text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
            prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            answers.append(tokenizer(str(answer), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
            labels.append(score("rlcore/arith", str(answer), str(a + b)))
    plen, width, pad = max(map(len, prompts)), max(map(len, answers)), tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (plen - len(p)) + p for p in prompts])
    prompt_mask = torch.tensor([[0] * (plen - len(p)) + [1] * len(p) for p in prompts])
    responses = torch.tensor([r + [pad] * (width - len(r)) for r in answers])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in answers])
    attention = torch.cat([prompt_mask, mask], dim=1)
    return Batch.from_dict(
        {
            "input_ids": torch.cat([prompt_ids, responses], dim=1),
            "attention_mask": attention,
            "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
            "responses": responses,
            "response_mask": mask,
            "acc": torch.tensor(labels),
        }
    )


def test_the_prm_learns_the_outcome_labels(tiny_model_dir: Path, tiny_tokenizer) -> None:
    config = load_config(
        [],
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "algorithm.adv_estimator=prime",
            "actor_rollout_ref.rollout.n=8",
            "reward_model.mini_batch_size=1",
            "reward_model.optim.lr=1e-3",
            "reward_model.model.beta_train=0.5",
            "trainer.device=cpu",
        ],
        [],
    )
    worker = PrimeRewardModelWorker(config, "reward_model")
    worker.init_model()
    batch = labelled_batch(tiny_tokenizer)
    assert batch["acc"].tolist() == [1.0, 0.0] * 4
    try:
        outs = [worker.compute_rm_score(batch) for _ in range(10)]
        validation = batch.select(batch.keys())
        validation.meta["validate"] = True
        frozen = worker.compute_rm_score(validation)
    finally:
        worker.shutdown()
    losses = [out.meta["metrics"]["reward_model/dpo_loss"] for out in outs]
    assert losses[-1] < losses[0] - 0.05, losses
    assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:])), losses
    assert outs[-1].meta["metrics"]["reward_model/dpo_acc"] == 1.0
    # after training, the implicit reward separates the labels: correct responses sum higher
    summed = outs[-1]["rm_scores"].sum(-1)
    assert summed[batch["acc"] == 1].min() > summed[batch["acc"] == 0].max()
    assert "reward_model/dpo_loss" not in frozen.meta["metrics"], "validation batches never train the PRM"


def test_registration_and_preset() -> None:
    registry = load_plugins().registry
    estimator = registry.get("advantage_estimator", "prime")
    assert estimator.spec.batch_keys == {"rm_scores", "acc"}
    config = load_config([], [], ["prime"])
    assert config.algorithm.adv_estimator == "prime"
    assert config.algorithm.reward_dpo_coef == 5.0 and config.algorithm.reward_gt_coef == 5.0
    assert config.reward_model.model.beta_train == 0.05 and config.reward_model.model["update"] == "before"
    assert config.reward_model.prime_granularity == "token" and config.reward_model.prime_norm == "batch_norm"


def test_bad_prime_settings_are_named(tiny_model_dir: Path) -> None:
    config = load_config(
        [], [f"actor_rollout_ref.model.path={tiny_model_dir}", "reward_model.model.loss_type=dpo"], ["prime"]
    )
    with pytest.raises(RLCoreError, match="reward_model.model.loss_type='dpo' is not supported by PRIME here"):
        PrimeRewardModelWorker(config, "reward_model")


def test_prime_trains_end_to_end(tmp_path: Path, tiny_model_dir: Path) -> None:
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    last, run_dir = tiny_run(tmp_path, tiny_model_dir, task, "reward_model.optim.lr=1e-3", presets=("prime",))
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert len(rows) == 2
    for row in rows:
        assert np.isfinite(row["reward_model/dpo_loss"]) and row["reward_model/grad_norm"] > 0
        assert row["critic/score/mean"] == pytest.approx(row["reward/rule_score_mean"])  # scores stay the outcome
    assert np.isfinite(last["actor/pg_loss"])
