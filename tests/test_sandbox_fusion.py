"""The code scorer on a Sandbox Fusion service (``reward_model.sandbox_fusion.*``), against a local server that
speaks Sandbox Fusion's ``run_code`` API: the same scores as the local sandbox, retries, the concurrency bound,
failures scored 0 with their reason, the config keys and a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rlcore_plugin_sandbox import host_isolation
from rlcore_plugin_sandbox.fusion import CONCURRENT_ENV, MEMORY_ENV, URL_ENV
from rlcore_plugin_sandbox.scorer import score
from rlcore_testkit.runs import dry_run, tiny_run

from rlcore import load_plugins
from rlcore.api import load_config
from tests.sandbox_fusion_server import FusionServer


@pytest.fixture
def server() -> Iterator[FusionServer]:
    fusion = FusionServer().start()
    yield fusion
    fusion.shutdown()
    fusion.server_close()


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The server in a process of its own: its URL and the JSON-lines log of the requests it ran."""
    log = tmp_path / "requests.jsonl"
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("sandbox_fusion_server.py")), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        yield process.stdout.readline().strip(), log
    finally:
        process.kill()
        process.wait()


@pytest.fixture
def fusion_env(server: FusionServer, monkeypatch: pytest.MonkeyPatch) -> FusionServer:
    """The scorer sends programs to ``server`` (as a run's ``on_config_resolved`` hook arranges)."""
    monkeypatch.setenv(URL_ENV, server.url)
    monkeypatch.setenv(CONCURRENT_ENV, "4")
    monkeypatch.setenv(MEMORY_ENV, "256")
    return server


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Sandbox Fusion unless a test asks; the local sandbox accepted where the kernel cannot confine fully."""
    for name in (URL_ENV, CONCURRENT_ENV, MEMORY_ENV):
        monkeypatch.delenv(name, raising=False)
    if host_isolation().level != "full":
        monkeypatch.setenv("RLCORE_SANDBOX_ALLOW_UNCONFINED", "1")


def fenced(code: str) -> str:
    return f"My solution:\n```python\n{code}\n```"


ADD = {"inputs": ["1 2\n", "10 -3\n", "0 0\n"], "outputs": ["3\n", "7", "0\n"], "time_limit": 1}
SOLUTIONS = {
    "correct": "a, b = map(int, input().split())\nprint(a + b)",
    "wrong": "a, b = map(int, input().split())\nprint(a - b)",
    "partly right": "a, b = map(int, input().split())\nprint(a + b if a else 99)",
    "crashing": "raise SystemExit(3)",
    "timing out": "while True:\n    pass",
    "memory hungry": "x = bytearray(2**31)\nprint(3)",
}
CALL_BASED = {"fn_name": "add", "inputs": [[1, 2], [3, 4]], "outputs": [3, 7]}


@pytest.mark.parametrize("name", SOLUTIONS)
def test_the_same_scores_through_sandbox_fusion_as_in_the_local_sandbox(
    name: str, server: FusionServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = score("codecontests", fenced(SOLUTIONS[name]), json.dumps(ADD))
    assert server.requests == []
    monkeypatch.setenv(URL_ENV, server.url)
    remote = score("codecontests", fenced(SOLUTIONS[name]), json.dumps(ADD))
    assert remote == local
    assert server.requests, "the program ran on the service"
    assert {(r["language"], r["run_timeout"], r["memory_limit_MB"]) for r in server.requests} == {("python", 1, 1024)}


def test_call_based_problems_score_alike(server: FusionServer, monkeypatch: pytest.MonkeyPatch) -> None:
    program = fenced("def add(a, b):\n    return a + b if a < 3 else 0")
    local = score("apps", program, CALL_BASED)
    monkeypatch.setenv(URL_ENV, server.url)
    assert (
        score("apps", program, CALL_BASED)
        == local
        == {
            "score": 0.5,
            "passed": 1,
            "tests": 2,
            "status": "wrong",
            "stderr_overflow": 0,
        }
    )


def test_memory_limit_mb_is_sent_when_the_problem_has_none(fusion_env: FusionServer) -> None:
    score("taco", fenced("print(input())"), {"inputs": ["x"], "outputs": ["x"]})
    score("taco", fenced("print(input())"), {"inputs": ["x"], "outputs": ["x"], "memory_limit": 64})
    assert [r["memory_limit_MB"] for r in fusion_env.requests] == [256, 64]
    assert fusion_env.requests[0]["stdin"] == "x" and fusion_env.requests[0]["run_timeout"] == 5


def test_a_500_is_retried(fusion_env: FusionServer) -> None:
    fusion_env.failures = 2
    result = score("codecontests", fenced(SOLUTIONS["correct"]), ADD)
    assert result["score"] == 1.0 and "sandbox_error" not in result
    assert len(fusion_env.requests) == 5  # 2 failed + 3 tests


def test_a_service_that_keeps_failing_scores_the_row_zero_with_the_reason(fusion_env: FusionServer) -> None:
    fusion_env.failures = 100
    result = score("codecontests", fenced(SOLUTIONS["correct"]), ADD)
    assert len(fusion_env.requests) == 3  # the first test, tried 3 times in all
    assert result["score"] == 0.0 and result["status"] == "sandbox_fusion_error"
    assert result["sandbox_error"] == (
        f"test 0: Sandbox Fusion after 3 attempts: HTTP 500 Internal Server Error from {fusion_env.url}"
    )


def test_a_wrong_path_is_not_retried(fusion_env: FusionServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_ENV, fusion_env.url.replace("/run_code", "/nowhere"))
    result = score("codecontests", fenced(SOLUTIONS["correct"]), ADD)
    assert len(fusion_env.requests) == 1
    assert result["sandbox_error"].endswith("after 1 attempt: HTTP 404 Not Found from " + os.environ[URL_ENV])


def test_an_unreachable_service_scores_zero_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = FusionServer()
    url = closed.url
    closed.server_close()
    monkeypatch.setenv(URL_ENV, url)
    result = score("codecontests", fenced(SOLUTIONS["correct"]), ADD)
    assert result["score"] == 0.0
    assert result["sandbox_error"].startswith(f"test 0: Sandbox Fusion after 3 attempts: no answer from {url}: ")
    assert "Connection refused" in result["sandbox_error"]


def test_max_concurrent_bounds_the_requests_in_flight(
    fusion_env: FusionServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONCURRENT_ENV, "2")
    program = fenced("import time\ntime.sleep(0.3)\nprint(input())")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: score("taco", program, {"inputs": [str(i)], "outputs": [str(i)]}), range(8)))
    assert [r["score"] for r in results] == [1.0] * 8
    assert fusion_env.most_in_flight == 2


def test_the_config_keys_in_each_of_verls_spellings() -> None:
    for key in ("reward_model.sandbox_fusion", "reward.sandbox_fusion", "sandbox_fusion"):
        config = load_config(overrides=[f"{key}.url=http://sandbox:8080/run_code", f"{key}.max_concurrent=3"])
        section = config.reward_model.sandbox_fusion
        assert (section.url, section.max_concurrent, section.memory_limit_mb) == (
            "http://sandbox:8080/run_code",
            3,
            1024,
        )


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://sandbox/run_code", "is not an http(s) URL"),
        ("sandbox:8080/run_code", "is not an http(s) URL"),
        ("http://sandbox:80x/run_code", "has a bad port"),
        ("http://sandbox:8080", "has no path: requests go to the URL as given (as in verl), so name the endpoint"),
    ],
)
def test_a_bad_url_is_a_dry_run_error_naming_the_key(url: str, problem: str) -> None:
    result = dry_run("actor_rollout_ref.model.path=m", f"reward.sandbox_fusion.url={url}")
    assert result.exit_code != 0
    assert f"reward_model.sandbox_fusion.url={url!r} {problem}" in result.output


def test_the_run_hands_the_settings_to_its_scorer_processes() -> None:
    hook = load_plugins().hook
    hook.on_config_resolved(config=load_config(overrides=["sandbox_fusion.url=http://h:1/run_code"]))
    assert (os.environ[URL_ENV], os.environ[CONCURRENT_ENV], os.environ[MEMORY_ENV]) == (
        "http://h:1/run_code",
        "64",
        "1024",
    )
    hook.on_config_resolved(config=load_config())
    assert URL_ENV not in os.environ


@pytest.fixture
def code_task(tmp_path: Path) -> dict[str, Path]:
    """Code problems (data_source codecontests) as train and validation files."""
    tests = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"], "time_limit": 1})
    rows = [
        {
            "data_source": "codecontests",
            "prompt": [{"role": "user", "content": f"Add two numbers ({i})."}],
            "reward_model": {"style": "rule", "ground_truth": tests},
            "extra_info": {"index": i},
        }
        for i in range(4)
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "code.parquet")
    return {"train": tmp_path / "code.parquet", "test": tmp_path / "code.parquet", "reward": Path()}


def test_the_dry_run_names_the_service_and_a_run_refuses_one_that_does_not_answer(
    code_task: dict[str, Path], server: FusionServer, tmp_path: Path, tiny_model_dir: Path
) -> None:
    planned = dry_run(
        f"data.train_files={code_task['train']}",
        "actor_rollout_ref.model.path=m",
        f"reward_model.sandbox_fusion.url={server.url}",
    )
    assert planned.exit_code == 0, planned.output
    assert f"sandbox fusion: code rewards (codecontests) run at {server.url} (64 requests at once" in planned.output
    assert server.requests == []  # a dry run sends nothing
    wrong = server.url.replace("/run_code", "/run")
    with pytest.raises(
        Exception, match=r"reward_model.sandbox_fusion.url='.*/run': the service does not answer: .*HTTP 404"
    ):
        tiny_run(
            tmp_path,
            tiny_model_dir,
            code_task,
            "custom_reward_function.path=null",
            f"reward_model.sandbox_fusion.url={wrong}",
        )
    assert not list((tmp_path / "runs").glob("*/*/metrics.jsonl"))


def test_a_real_run_scores_its_code_rewards_on_sandbox_fusion(
    code_task: dict[str, Path], server_process: tuple[str, Path], tmp_path: Path, tiny_model_dir: Path
) -> None:
    url, log = server_process
    last, _ = tiny_run(
        tmp_path,
        tiny_model_dir,
        code_task,
        "custom_reward_function.path=null",
        f"reward_model.sandbox_fusion.url={url}",
        "reward_model.sandbox_fusion.max_concurrent=2",
        "trainer.total_training_steps=1",
        "trainer.test_freq=0",
        "trainer.val_before_train=false",
    )
    assert last["training/global_step"] == 1 and last["reward/scorer_errors"] == 0
    probe, *programs = [json.loads(line) for line in log.read_text().splitlines()]
    assert probe["code"] == "print(1)"
    assert len(programs) == 16  # 4 prompts x 4 responses, one test each, none retried
    assert {p["stdin"] for p in programs} == {"1 2\n"}
    assert max(p["in_flight"] for p in programs) <= 2


def test_without_the_plugin_the_keys_name_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlcore.api import make_plugin_manager

    monkeypatch.setenv("RLCORE_DISABLE_PLUGINS", "rlcore-plugin-sandbox")
    manager = make_plugin_manager()
    with pytest.raises(
        Exception, match="'reward.sandbox_fusion.url' is a key of rlcore-plugin-sandbox, which is installed"
    ):
        load_config(overrides=["reward.sandbox_fusion.url=http://h:1/run_code"], manager=manager)
