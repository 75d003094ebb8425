"""Text a tokenizer cannot encode is named by file, row and key, never a tokenizer traceback: a lone surrogate
(valid JSON, ``"\\ud800"``) in RL prompts and SFT rows, and a tokenizer that fails on one row's rendered text.
Real files, the real tiny tokenizer, and one real ``rlcore run`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rlcore_plugin_sft.config import load_sft_config
from rlcore_plugin_sft.dataset import SFTDataset
from rlcore_testkit.runs import make_tiny_task, tiny_overrides
from transformers import AutoTokenizer

from rlcore.data import DataError
from rlcore.data.rl_dataset import RLDataset

#: a lone surrogate: json.dumps writes it as the escape "\\ud800", which json.loads accepts; UTF-8 cannot encode it
LONE = "\ud800"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    """One JSON object per line (ASCII, so lone surrogates are written as escapes)."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def rl_row(text: str) -> dict[str, Any]:
    """One verl-schema row whose prompt is ``text``."""
    return {
        "data_source": "tiny/digits",
        "prompt": [{"role": "user", "content": text}],
        "reward_model": {"ground_truth": "1"},
    }


def test_a_lone_surrogate_in_a_prompt_names_the_file_row_and_key(tmp_path: Path, tiny_tokenizer: Any) -> None:
    path = write_jsonl(tmp_path / "train.jsonl", [rl_row("fine"), rl_row(f"broken {LONE} text")])
    assert "\\ud800" in path.read_text()
    with pytest.raises(DataError) as err:
        RLDataset(str(path), tiny_tokenizer, {"max_prompt_length": 64})
    assert str(err.value) == (
        f"{path}, row 1 (line 2): key 'prompt'[0].content (data.prompt_key) holds invalid Unicode: a lone "
        "surrogate U+D800 at character 7 (half of a UTF-16 pair, e.g. a JSON '\\ud800' escape), which no "
        "tokenizer can encode; fix the text in the file"
    )


def test_a_tokenizer_failure_names_the_row(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The chat template writes a lone surrogate for one row only: the batched tokenizer call fails, and the
    row is found by tokenizing each text alone."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    tokenizer.chat_template = (
        "{% for m in messages %}{% if 'BOOM' in m['content'] %}{{ '\\ud800' }}{% endif %}{{ m['content'] }}{% endfor %}"
    )
    path = write_jsonl(tmp_path / "train.jsonl", [rl_row("one"), rl_row("two"), rl_row("BOOM three")])
    with pytest.raises(DataError, match=r"train.jsonl, row 2 \(line 3\): the tokenizer failed on key 'prompt' "):
        RLDataset(str(path), tokenizer, {"max_prompt_length": 64})


CHAT_OK = [{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]


@pytest.mark.parametrize(
    ("overrides", "rows", "where"),
    [
        (
            [],
            [{"question": "1+1=", "answer": "2"}, {"question": "2+2=", "answer": f"4 {LONE}"}],
            "the response ('answer', data.response_key)",
        ),
        (
            ["data.multiturn.enable=true"],
            [{"messages": CHAT_OK}, {"messages": [{"role": "user", "content": f"hi {LONE}"}, CHAT_OK[1]]}],
            "messages[0].content (data.multiturn.messages_key)",
        ),
    ],
    ids=["single-turn", "multi-turn"],
)
def test_sft_rows_with_a_lone_surrogate_are_named(
    tmp_path: Path, tiny_tokenizer: Any, overrides: list[str], rows: list[dict[str, Any]], where: str
) -> None:
    path = write_jsonl(tmp_path / "sft.jsonl", rows)
    data = load_sft_config([], overrides).data
    with pytest.raises(DataError) as err:
        SFTDataset(str(path), tiny_tokenizer, data)
    assert str(err.value).startswith(f"{path}, row 1 (line 2): {where} holds invalid Unicode: a lone surrogate U+D800")


def test_rlcore_run_names_the_row_in_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The case as found: ``rlcore run`` on a jsonl file with a lone surrogate ended in a tokenizer traceback."""
    task = make_tiny_task(tmp_path / "task")
    bad = tmp_path / "train.jsonl"
    write_jsonl(bad, [rl_row("fine"), rl_row(LONE)])
    args = [*tiny_overrides(tmp_path, tiny_model_dir, task), f"data.train_files={bad}", "data.train_batch_size=1"]
    args += ["actor_rollout_ref.actor.ppo_mini_batch_size=1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    result = subprocess.run(
        [sys.executable, "-m", "rlcore", "run", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (
        f"error: {bad}, row 1 (line 2): key 'prompt'[0].content (data.prompt_key) holds invalid Unicode"
        in result.stderr
    )
