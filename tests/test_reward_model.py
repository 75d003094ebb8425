"""The discriminative reward model: the worker's scores, re-rendering for another tokenizer, and a run.

The reward model is a tiny ``Qwen2ForSequenceClassification`` built from config; the worker runs it on the
FSDP engine (world size 1, gloo), and its scores are checked against the same model run directly by
transformers on the unpadded text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_testkit.runs import make_tiny_task, tiny_run
from rlcore_testkit.tiny import CHAT_TEMPLATE, default_corpus, make_tiny_reward_model_dir

from rlcore.api.batch import Batch
from rlcore.config import load_config
from rlcore.errors import RLCoreError
from rlcore.tracking.sinks import read_metrics
from rlcore.workers.reward_model import RewardModelWorker

#: another chat format, so that a re-rendered conversation differs from the policy's
OTHER_TEMPLATE = CHAT_TEMPLATE.replace("<|im_start|>", "<|endoftext|>")


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny reward model sharing the policy's tokenizer."""
    return make_tiny_reward_model_dir(tmp_path_factory.mktemp("rm"))


@pytest.fixture(scope="module")
def other_rm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny reward model with its own tokenizer (another corpus) and chat template."""
    corpus = [line.upper() for line in default_corpus(seed=3)]
    return make_tiny_reward_model_dir(tmp_path_factory.mktemp("rm-other"), corpus=corpus, chat_template=OTHER_TEMPLATE)


def reference_score(rm_path: Path, ids: list[int]) -> float:
    """The reward model's logit at the last of ``ids``, computed by transformers on the unpadded sequence."""
    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(rm_path, num_labels=1, dtype=torch.float32).eval()
    with torch.no_grad():
        return float(model(input_ids=torch.tensor([ids])).logits[0, -1, 0])


def policy_batch(tokenizer, prompts: list[str], responses: list[str], width: int = 8) -> Batch:
    """Left-padded prompts and right-padded responses as the rollout produces them (with ``raw_prompt``)."""
    prompt_ids = [
        tokenizer(
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )["input_ids"]
        for p in prompts
    ]
    response_ids = [tokenizer(r, add_special_tokens=False)["input_ids"][:width] for r in responses]
    plen = max(len(p) for p in prompt_ids)
    pad = tokenizer.pad_token_id
    rows, masks = [], []
    for p, r in zip(prompt_ids, response_ids, strict=True):
        rows.append([pad] * (plen - len(p)) + p + r + [pad] * (width - len(r)))
        masks.append([0] * (plen - len(p)) + [1] * (len(p) + len(r)) + [0] * (width - len(r)))
    input_ids, mask = torch.tensor(rows), torch.tensor(masks)
    batch = Batch.from_dict(
        {
            "input_ids": input_ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "prompts": input_ids[:, :plen],
            "responses": input_ids[:, plen:],
            "response_mask": mask[:, plen:],
        }
    )
    raw = np.empty(len(prompts), dtype=object)
    for i, prompt in enumerate(prompts):
        raw[i] = [{"role": "user", "content": prompt}]
    batch["raw_prompt"] = raw
    return batch


def make_worker(model_dir: Path, rm_path: Path, *extra: str) -> RewardModelWorker:
    config = load_config(
        [],
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "reward_model.enable=true",
            f"reward_model.model.path={rm_path}",
            "trainer.device=cpu",
            *extra,
        ],
        [],
    )
    worker = RewardModelWorker(config, "reward_model")
    worker.init_model()
    return worker


PROMPTS = ["1+2=", "how many apples"]
RESPONSES = ["3 then 4", "the sum"]


def test_scores_are_the_logit_at_the_last_valid_token(tiny_model_dir: Path, tiny_tokenizer, rm_dir: Path) -> None:
    batch = policy_batch(tiny_tokenizer, PROMPTS, RESPONSES)
    worker = make_worker(tiny_model_dir, rm_dir, "reward_model.micro_batch_size_per_gpu=1")
    try:
        assert not worker.rerender
        scores = worker.compute_rm_score(batch)["rm_scores"]
    finally:
        worker.shutdown()
    valid = batch["response_mask"].sum(-1)
    assert scores.shape == batch["responses"].shape
    for i in range(len(batch)):
        ids = batch["input_ids"][i][batch["attention_mask"][i].bool()].tolist()
        expected = reference_score(rm_dir, ids)
        assert scores[i, int(valid[i]) - 1].item() == pytest.approx(expected, abs=1e-4)
        assert int((scores[i] != 0).sum()) == 1, "one score per response, on its last valid token"


def test_another_tokenizer_rerenders_with_its_chat_template(
    tiny_model_dir: Path, tiny_tokenizer, other_rm_dir: Path
) -> None:
    from transformers import AutoTokenizer

    batch = policy_batch(tiny_tokenizer, PROMPTS, RESPONSES)
    worker = make_worker(tiny_model_dir, other_rm_dir, "reward_model.max_length=40")
    try:
        assert worker.rerender
        scores = worker.compute_rm_score(batch)["rm_scores"]
    finally:
        worker.shutdown()
    rm_tokenizer = AutoTokenizer.from_pretrained(other_rm_dir)
    valid = batch["response_mask"].sum(-1)
    for i, (prompt, response) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):
        text = tiny_tokenizer.decode(batch["responses"][i, : int(valid[i])], skip_special_tokens=True)
        assert text == response
        chat = [{"role": "user", "content": prompt}, {"role": "assistant", "content": text}]
        rendered = rm_tokenizer.apply_chat_template(chat, tokenize=False)
        assert rendered.startswith("<|endoftext|>user")
        ids = rm_tokenizer(rendered, add_special_tokens=False)["input_ids"][-40:]
        assert scores[i, int(valid[i]) - 1].item() == pytest.approx(reference_score(other_rm_dir, ids), abs=1e-4)


def test_rerendering_needs_the_raw_chat(tiny_model_dir: Path, tiny_tokenizer, other_rm_dir: Path) -> None:
    batch = policy_batch(tiny_tokenizer, PROMPTS, RESPONSES)
    batch.pop("raw_prompt")
    worker = make_worker(tiny_model_dir, other_rm_dir)
    try:
        with pytest.raises(RLCoreError, match="no raw_prompt: set data.return_raw_chat=true"):
            worker.compute_rm_score(batch)
    finally:
        worker.shutdown()


def test_enable_without_a_model_path_is_named(tiny_model_dir: Path) -> None:
    config = load_config([], [f"actor_rollout_ref.model.path={tiny_model_dir}", "reward_model.enable=true"], [])
    with pytest.raises(RLCoreError, match=r"reward_model.enable=true needs reward_model.model.path"):
        RewardModelWorker(config, "reward_model")


def test_a_run_with_a_reward_model_and_a_rule_scorer_trains(tmp_path: Path, tiny_model_dir: Path, rm_dir: Path) -> None:
    task = make_tiny_task(tmp_path / "task", train_rows=8, test_rows=2)
    last, run_dir = tiny_run(
        tmp_path,
        tiny_model_dir,
        task,
        "algorithm.adv_estimator=grpo",
        "reward_model.enable=true",
        f"reward_model.model.path={rm_dir}",
        "reward_model.micro_batch_size_per_gpu=8",
    )
    rows = [row for row in read_metrics(run_dir / "metrics.jsonl") if "training/global_step" in row]
    assert [row["training/global_step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["reward/rule_scored"] == 16  # the custom rule function scores every response ...
        # ... and the sequence score is rule + reward model
        assert row["critic/score/mean"] == pytest.approx(row["reward/rule_score_mean"] + row["reward/rm_score_mean"])
        assert row["reward/rm_score_mean"] != 0
        assert row["timing_s/reward_model"] > 0
    assert np.isfinite(last["actor/pg_loss"])


def test_dry_run_names_what_a_reward_model_config_does(tmp_path: Path, tiny_model_dir: Path, rm_dir: Path) -> None:
    from click.testing import CliRunner

    from rlcore.cli import cli

    task = make_tiny_task(tmp_path, train_rows=4, test_rows=2)
    base = [
        f"data.train_files={task['train']}",
        f"actor_rollout_ref.model.path={tiny_model_dir}",
        "reward_model.enable=true",
        f"reward_model.model.path={rm_dir}",
        "trainer.device=cpu",
    ]
    ok = CliRunner().invoke(
        cli, ["run", "--dry-run", *base, "reward_model.rollout.name=vllm", "reward_model.num_workers=4"]
    )
    assert ok.exit_code == 0, ok.output
    assert "note: reward_model.rollout.name=vllm changes nothing in rlcore" in ok.output
    verl_keys = [
        "reward_model.micro_batch_size=4",
        "reward_model.model.use_remove_padding=true",
        "reward_model.model.use_fused_kernels=true",
    ]
    accepted = CliRunner().invoke(cli, ["run", "--dry-run", *base, *verl_keys])
    assert accepted.exit_code == 0, accepted.output
    assert "note: reward_model.model.use_remove_padding=True changes nothing in rlcore" in accepted.output
    assert "note: reward_model.model.use_fused_kernels=True changes nothing in rlcore" in accepted.output
    bad = CliRunner().invoke(cli, ["run", "--dry-run", *base, "reward_model.ulysses_sequence_parallel_size=2"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "reward_model.ulysses_sequence_parallel_size: these reward-model options of verl" in bad.output


def test_verls_global_micro_batch_size_is_split_over_the_ranks(tiny_model_dir: Path, rm_dir: Path) -> None:
    """``reward_model.micro_batch_size`` (verl's global size) gives the per-rank size; the per-GPU key wins."""
    worker = make_worker(tiny_model_dir, rm_dir, "reward_model.micro_batch_size=3")
    try:
        assert worker.micro_batch_size == 3  # one rank
    finally:
        worker.shutdown()
    both = make_worker(
        tiny_model_dir, rm_dir, "reward_model.micro_batch_size=3", "reward_model.micro_batch_size_per_gpu=2"
    )
    try:
        assert both.micro_batch_size == 2
    finally:
        both.shutdown()
