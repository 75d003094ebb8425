"""``rlcore sft``'s data and config: single- and multi-turn rows, the loss mask (audited by decoding it), the
padded batch, and clear errors for bad rows, keys and values (no model is trained here)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf
from rlcore_plugin_sft.config import engine_config, load_sft_config, sft_batch_sizes
from rlcore_plugin_sft.dataset import SFTDataset, sft_batch

from rlcore.agents.audit import mask_spans
from rlcore.config.problems import ConfigError
from rlcore.data import DataError
from rlcore.data.collate import collate_rows

CHAT = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "2+3="},
    {"role": "assistant", "content": "5"},
    {"role": "user", "content": "and 4+4?"},
    {"role": "assistant", "content": "8, the sum"},
]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def render(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool = False) -> list[int]:
    """The token ids of the chat template's rendering of ``messages``."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def data_config(**overrides: Any) -> Any:
    """The ``data`` section of the SFT defaults with ``overrides`` (dotted keys under ``data``)."""
    return load_sft_config([], [f"data.{key}={json.dumps(value)}" for key, value in overrides.items()]).data


def test_single_turn_mask_covers_the_response_and_eos(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """Parquet prompt/response rows: the loss is on the response and the EOS only, the prompt is the chat
    template's user turn with the generation prompt (as the RL dataset renders it)."""
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist([{"q": "2+3=", "a": "5"}, {"q": "10+9=", "a": "19"}]), path)
    dataset = SFTDataset(str(path), tiny_tokenizer, data_config(prompt_key="q", response_key="a"))
    assert len(dataset) == 2
    assert dataset.loss_texts(1) == ["19<|im_end|>"]
    row = dataset[1]
    prompt = render(tiny_tokenizer, [{"role": "user", "content": "10+9="}], True)
    assert row["input_ids"][: len(prompt)] == prompt
    assert sum(row["loss_mask"]) == len(row["input_ids"]) - len(prompt)


def test_multi_turn_mask_is_exactly_the_assistant_turns(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """The audit: decoding the loss spans gives each assistant message with the template's end of turn, and
    the whole sequence is the template's rendering of the chat."""
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CHAT}])
    dataset = SFTDataset(str(path), tiny_tokenizer, data_config(**{"multiturn": {"enable": True}}))
    assert dataset.loss_texts(0) == ["5<|im_end|>", "8, the sum<|im_end|>"]
    assert dataset[0]["input_ids"] == render(tiny_tokenizer, CHAT)
    assert mask_spans([0, 1, 1, 0, 1]) == [(1, 3), (4, 5)]


def test_the_mask_passes_the_multi_turn_mask_audit(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """The SFT batch of single- and multi-turn rows passes rlcore's rollout mask audit (every run of loss
    tokens opens after the assistant generation prompt and ends with the end-of-turn token), and the audit
    catches a mask that also trains a user turn."""
    from rlcore.agents.audit import MaskAuditError, audit_batch

    chat = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CHAT}, {"messages": CHAT[1:3]}])
    single = write_jsonl(tmp_path / "single.jsonl", [{"question": "2+3=", "answer": "5"}])
    for path, config in ((chat, {"multiturn": {"enable": True}}), (single, {})):
        dataset = SFTDataset(str(path), tiny_tokenizer, data_config(**config))
        batch = sft_batch(collate_rows([dataset[i] for i in range(len(dataset))]), tiny_tokenizer.pad_token_id)
        assert audit_batch(batch, tiny_tokenizer) == sum(len(dataset.loss_texts(i)) for i in range(len(dataset)))
    chat_batch = sft_batch(
        collate_rows([SFTDataset(str(chat), tiny_tokenizer, data_config(multiturn={"enable": True}))[0]]), 0
    )
    chat_batch["response_mask"] = chat_batch["attention_mask"][:, -chat_batch["responses"].shape[1] :].clone()
    with pytest.raises(MaskAuditError):
        audit_batch(chat_batch, tiny_tokenizer)


def test_batch_cuts_before_the_first_loss_token(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """``sft_batch``: left-padded "prompts", right-padded "responses", ``response_mask`` = the loss mask, and
    the concatenation is the original sequence."""
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CHAT}, {"messages": CHAT[1:3]}])
    dataset = SFTDataset(str(path), tiny_tokenizer, data_config(**{"multiturn": {"enable": True}}))
    batch = sft_batch(collate_rows([dataset[0], dataset[1]]), tiny_tokenizer.pad_token_id)
    for i in range(2):
        ids, mask = dataset[i]["input_ids"], dataset[i]["loss_mask"]
        valid = batch["attention_mask"][i].bool()
        assert batch["input_ids"][i][valid].tolist() == ids
        width = batch["prompts"].shape[1]
        cut = mask.index(1)
        assert batch["response_mask"][i][: len(ids) - cut].tolist() == mask[cut:]
        assert batch["attention_mask"][i][: width - cut].sum() == 0  # left padding
    assert batch["position_ids"][1][batch["attention_mask"][1].bool()].tolist() == list(
        range(len(dataset[1]["input_ids"]))
    )
    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], 1))


def test_truncation(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """``error`` names the file, row and limit; ``right`` keeps the head (a row left with no loss token is
    skipped); ``left`` keeps the tail."""
    path = write_jsonl(
        tmp_path / "t.jsonl", [{"question": "1+1=", "answer": "2 " * 30}, {"question": "x", "answer": "y"}]
    )
    with pytest.raises(DataError, match=r"t\.jsonl, row 0 \(line 1\): \d+ tokens exceed data\.max_length=12"):
        SFTDataset(str(path), tiny_tokenizer, data_config(max_length=12))
    left = SFTDataset(str(path), tiny_tokenizer, data_config(max_length=12, truncation="left"))
    assert len(left[0]["input_ids"]) == 12 and left.loss_texts(0)[0].endswith("<|im_end|>")
    prompt_tokens = len(render(tiny_tokenizer, [{"role": "user", "content": "1+1="}], True))
    right = SFTDataset(str(path), tiny_tokenizer, data_config(max_length=prompt_tokens, truncation="right"))
    assert len(right) == 1, "the row truncated to its prompt has nothing to train on"


@pytest.mark.parametrize(
    ("rows", "config", "message"),
    [
        ([{"question": "a"}], {}, r"row 0 \(line 1\): no column 'answer' \(data\.response_key\)"),
        ([{"question": "a", "answer": 3}], {}, r"the response \('answer'\) must be a string, got int"),
        (
            [{"question": {"x": "a"}, "answer": "b"}],
            {"prompt_dict_keys": ["y"]},
            r"no key 'y' \(data\.prompt_dict_keys\)",
        ),
        ([{"messages": []}], {"multiturn": {"enable": True}}, r"'messages' must be a non-empty list"),
        (
            [{"messages": [{"content": "hi"}]}],
            {"multiturn": {"enable": True}},
            r"messages\[0\] must be an object with a 'role'",
        ),
        ([{"messages": CHAT[:2]}], {"multiturn": {"enable": True}}, r"has no assistant message to train on"),
        ([{"chat": CHAT}], {"multiturn": {"enable": True}}, r"no column 'messages' \(data\.multiturn\.messages_key\)"),
    ],
)
def test_bad_rows_name_file_row_and_key(
    tmp_path: Path, tiny_tokenizer: Any, rows: list[Any], config: dict[str, Any], message: str
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(DataError, match=message) as info:
        SFTDataset(str(path), tiny_tokenizer, data_config(**config))
    assert "bad.jsonl" in str(info.value)


def test_a_template_that_rewrites_earlier_turns_is_rejected(tmp_path: Path, tiny_tokenizer: Any) -> None:
    """A template that renders the last assistant turn differently (as Qwen3's thinking templates do) cannot
    give each turn's tokens: the row is rejected, naming the turn."""
    template = (
        "{% for m in messages %}{% if loop.last %}<|im_start|>LAST {{ m['content'] }}<|im_end|>"
        "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = template
    path = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CHAT}])
    with pytest.raises(
        DataError, match=r"chat\.jsonl, row 0 \(line 1\): the chat template does not render messages\[2\]"
    ):
        SFTDataset(str(path), tokenizer, data_config(multiturn={"enable": True}))


def test_config_errors_are_all_reported_with_suggestions(tmp_path: Path) -> None:
    """Unknown keys (with the closest key), wrong types, unsupported verl features and closed choices, at once."""
    overrides = [
        "data.micro_batch_size_per_gpus=2",
        "optim.lr=fast",
        "model.use_liger=true",
        "trainer.default_hdfs_dir=hdfs://x",
        "optim.lr_scheduler=wsd",
    ]
    with pytest.raises(ConfigError) as info:
        load_sft_config([], overrides)
    problems = info.value.problems
    assert len(problems) == 5, problems
    assert (
        "unknown SFT config key 'data.micro_batch_size_per_gpus'. Did you mean 'data.micro_batch_size_per_gpu'?"
        in problems[0]
    )
    assert "optim.lr='fast' has the wrong type" in problems[1]
    assert any("model.use_liger=True: Liger kernels are not supported" in p for p in problems)
    assert any("trainer.default_hdfs_dir='hdfs://x'" in p for p in problems)
    assert any("optim.lr_scheduler='wsd' must be one of cosine, constant" in p for p in problems)


def test_verl_keys_reach_the_engine_config(tmp_path: Path) -> None:
    """Each SFT key lands where the engine reads it (verl's older ``warmup_steps_ratio`` spelling too), and the
    batch arithmetic names the SFT keys."""
    file = tmp_path / "sft.yaml"
    file.write_text("optim:\n  warmup_steps_ratio: 0.2\n")
    config = load_sft_config(
        [str(file)],
        [
            "model.partial_pretrain=/m",
            "optim.lr=2e-5",
            "optim.clip_grad=0.5",
            "model.enable_gradient_checkpointing=true",
            "model.lora_rank=8",
            "model.strategy=megatron",
            "use_remove_padding=true",
            "trainer.max_ckpt_to_keep=2",
            "model.fsdp_config.offload_params=true",
        ],
    )
    engine = engine_config(config)
    actor = engine.actor_rollout_ref.actor
    assert engine.actor_rollout_ref.model.path == "/m"
    assert (actor.optim.lr, actor.grad_clip, actor.optim.lr_warmup_steps_ratio) == (2e-5, 0.5, 0.2)
    assert actor.strategy == "megatron" and actor.optim.lr_scheduler_type == "cosine"
    assert (
        engine.actor_rollout_ref.model.enable_gradient_checkpointing and engine.actor_rollout_ref.model.lora_rank == 8
    )
    assert engine.actor_rollout_ref.model.use_remove_padding and engine.trainer.max_actor_ckpt_to_keep == 2
    assert actor.fsdp_config.param_offload is True
    assert list(actor.checkpoint.save_contents) == ["model", "optimizer", "extra", "hf_model"]
    sizes = sft_batch_sizes(
        OmegaConf.merge(config, {"data": {"train_batch_size": 8, "micro_batch_size_per_gpu": 2}}), 2
    )
    assert (sizes.per_rank, sizes.micro) == (4, 2)
    with pytest.raises(
        ConfigError, match=r"data\.train_batch_size \(8\) must be divisible by the number of data-parallel ranks \(3\)"
    ):
        sft_batch_sizes(OmegaConf.merge(config, {"data": {"train_batch_size": 8}}), 3)
    with pytest.raises(ConfigError, match=r"must be divisible by data\.micro_batch_size_per_gpu \(3\)"):
        sft_batch_sizes(OmegaConf.merge(config, {"data": {"train_batch_size": 8, "micro_batch_size_per_gpu": 3}}), 1)


def test_cli_reports_bad_input_without_a_traceback(tmp_path: Path, tiny_model_dir: Path) -> None:
    """``rlcore sft`` with a bad row: one ``error:`` line naming the file and row, exit status 2, and no
    checkpoint; ``--dry-run`` reports every config problem at once."""
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question": "1+1=", "answer": "2"}, {"question": "2+2="}])
    args = [
        sys.executable,
        "-m",
        "rlcore",
        "sft",
        f"data.train_files={bad}",
        f"model.partial_pretrain={tiny_model_dir}",
    ]
    args += [
        "trainer.device=cpu",
        f"trainer.runs_dir={tmp_path / 'runs'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
    ]
    result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "bad.jsonl, row 1 (line 2): no column 'answer' (data.response_key)" in result.stderr
    assert not list((tmp_path / "ckpt").glob("global_step_*"))
    dry = subprocess.run(
        [*args[:4], "data.train_batch_size=0", "model.strategy=nope", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 2 and "2 problems found; nothing was started" in dry.stderr, dry.stderr
    assert "data.train_batch_size must be a positive integer, got 0" in dry.stderr
    assert "model.strategy=nope" in dry.stderr
