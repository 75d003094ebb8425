"""The code scorer: programs run in the core sandbox on a problem's tests; hostile ones score 0 within limits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from rlcore_plugin_sandbox import host_isolation
from rlcore_plugin_sandbox.scorer import extract_program, parse_tests, score

from rlcore.api import Batch, NaiveRewardManager, RewardModelConfig, RLCoreError
from rlcore.reward.scoring import RegistryScorer

#: a + b from one line of standard input; 1 s of CPU time (2 s wall), 64 MB
ADD = {"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7", "0\n"], "time_limit": 1, "memory_limit": 64}


@pytest.fixture(autouse=True)
def accept_this_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel cannot confine programs fully, accept it: scoring is the subject here
    (``test_sandbox_host.py`` tests the refusal)."""
    if host_isolation().level != "full":
        monkeypatch.setenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", "1")


def fenced(code: str) -> str:
    return f"Here is my solution:\n```python\n{code}\n```\nDone."


def run(code: str, tests: dict = ADD) -> tuple[dict, float]:
    start = time.perf_counter()
    result = score("codecontests", fenced(code), json.dumps(tests))
    return result, time.perf_counter() - start


def test_a_correct_program_scores_one() -> None:
    result, _ = run("a, b = map(int, input().split())\nprint(a + b)")
    assert result == {"score": 1.0, "passed": 3, "tests": 3, "status": "ok", "stderr_overflow": 0}


def test_a_chatty_correct_program_scores_one_and_its_stderr_is_counted() -> None:
    """Only stdout past the output limit fails a test; stderr past it is counted in ``stderr_overflow``."""
    result, _ = run("import sys\nsys.stderr.write('debug ' * 20_000)\na, b = map(int, input().split())\nprint(a + b)")
    assert result == {"score": 1.0, "passed": 3, "tests": 3, "status": "ok", "stderr_overflow": 3}


def test_a_test_input_without_a_utf8_form_names_the_sample_and_the_test() -> None:
    tests = {"inputs": ["1 2\n", "\ud800"], "outputs": ["3\n", "x"]}
    with pytest.raises(RLCoreError) as refused:
        score("taco", fenced("print(input())"), tests, {"index": 17})
    assert str(refused.value).startswith(
        "code scorer (taco, sample 17): test 1: the program's stdin is not valid text: surrogates not allowed '\\ud800'"
    )


def test_partly_right_scores_the_fraction_passed() -> None:
    result, _ = run("a, b = map(int, input().split())\nprint(a + b if a else -1)")
    assert result["score"] == pytest.approx(2 / 3) and result["status"] == "wrong"  # 0 0 -> -1


def test_call_based_problems() -> None:
    tests = {"fn_name": "add", "inputs": [[1, 2], [[1], [2]]], "outputs": [3, [1, 2]], "time_limit": 1}
    assert score("apps", fenced("def add(a, b):\n    return a + b"), tests)["score"] == 1.0
    assert score("apps", fenced("def add(a, b):\n    return 0"), tests)["score"] == 0.0


@pytest.mark.parametrize(
    ("name", "code", "status", "limit_s"),
    [
        ("wrong", "print(42)", "wrong", 2.0),
        ("crashing", "raise SystemExit(input()[1000])", "error", 2.0),
        ("hanging on the CPU", "while True:\n    pass", "timeout", 2.5),
        ("sleeping", "import time\ntime.sleep(60)", "timeout", 2.5),
        ("memory-hogging", "blocks = [bytearray(2**20) for _ in range(4096)]\nprint(len(blocks))", "memory", 2.5),
        (
            "network-using",
            "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\nprint(3)",
            "blocked",
            2.0,
        ),
        ("process-spawning", "import subprocess\nsubprocess.run(['echo', '3'])\nprint(3)", "blocked", 2.0),
    ],
)
def test_a_bad_program_scores_zero_within_its_limit(name: str, code: str, status: str, limit_s: float) -> None:
    result, elapsed = run(code)
    assert result["score"] == 0.0, name
    assert result["status"] == status, name
    # a test that runs out of time or memory ends the sample: one limit, not one per test
    assert elapsed < limit_s + 1.5, f"{name} took {elapsed:.1f} s"


def test_a_file_writing_program_scores_zero_and_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "pwned.txt"
    result, _ = run(f"open({str(target)!r}, 'w').write('x')\nprint(3)")
    assert result["score"] == 0.0 and result["status"] == "blocked"
    assert not target.exists()


def test_output_beyond_the_cap_fails_the_test() -> None:
    result, elapsed = run("print('3' * 10_000_000)")
    assert result["score"] == 0.0 and elapsed < 4


def test_the_program_is_the_last_python_block() -> None:
    text = "```\nnot this\n```\n```python\nprint(1)\n```\n```text\nnor this\n```"
    assert extract_program(text) == "print(1)\n"
    assert extract_program("```\nonly\n```") == "only\n"
    assert extract_program("print(2)") == "print(2)"


def test_a_malformed_ground_truth_is_a_data_error() -> None:
    with pytest.raises(RLCoreError, match="not JSON"):
        parse_tests("{inputs:")
    with pytest.raises(RLCoreError, match="'outputs' must be a list as long as its 'inputs'"):
        parse_tests({"inputs": ["1"], "outputs": []})


def test_a_batch_scores_through_the_scorer_pool(tiny_tokenizer, plugin_manager) -> None:
    """The registered scorer for verl's code data sources, under the reward manager's scorer processes:
    a correct, a hanging and a crashing program in one batch, two at a time."""
    programs = [
        "a, b = map(int, input().split())\nprint(a + b)",
        "while True:\n    pass",
        "raise ValueError('no')",
    ]
    ids = [tiny_tokenizer(fenced(p), add_special_tokens=False)["input_ids"] for p in programs]
    width = max(len(i) for i in ids)
    responses = torch.full((len(ids), width), tiny_tokenizer.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for row, tokens in enumerate(ids):
        responses[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
    batch = Batch.from_dict({"responses": responses, "response_mask": mask})
    batch["data_source"] = np.array(["codecontests", "taco", "apps"], dtype=object)
    batch["reward_model"] = np.array([{"ground_truth": json.dumps(ADD)} for _ in ids], dtype=object)
    manager = NaiveRewardManager(
        tiny_tokenizer, RegistryScorer(plugin_manager.registry), RewardModelConfig(scorer_workers=2, scorer_timeout=10)
    )
    try:
        result = manager(batch)
    finally:
        manager.close()
    assert result.token_level_scores.sum(-1).tolist() == [1.0, 0.0, 0.0]
    assert result.extra_info["status"] == ["ok", "timeout", "error"]
    assert result.metrics["reward/scorer_timeouts"] == 0  # the sandbox's limit ended the hang, not the pool's
