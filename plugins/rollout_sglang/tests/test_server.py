"""SGLang's server mode: the HTTP client's timeouts, retries, connection limit and start-up wait, against real
local HTTP servers (an aiohttp app in a thread, and server processes) that answer like SGLang's ``/generate``
and ``/health_generate`` and fail or stall on purpose. The rollout-engine contract in server mode, which needs
CUDA and SGLang, is ``test_engine.py::TestSGLangServerContract``."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rlcore_plugin_sglang.server import (
    HttpClient,
    ServerSettings,
    free_port,
    launch_server,
    rollout_mode,
    server_command,
    stop,
)

from rlcore.errors import RLCoreError

FAST = {"retry_delay": 0.01, "timeout": 2.0}


class FakeSGLang:
    """A real aiohttp server on a free port, in its own thread: ``/generate`` answers with the prompt reversed
    (SGLang's answer layout); ``fail_first`` requests get HTTP ``fail_status``; each request waits ``delay`` s."""

    def __init__(self) -> None:
        self.fail_first = 0
        self.fail_status = 503
        self.delay = 0.0
        self.requests = 0
        self.in_flight = 0
        self.peak = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _generate(self, request: Any) -> Any:
        from aiohttp import web

        self.requests += 1
        number = self.requests
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if number <= self.fail_first:
                return web.Response(status=self.fail_status, text="overloaded")
            body = await request.json()
            ids = body["input_ids"][::-1]
            logprobs = [[-0.5, t, None] for t in ids] if body.get("return_logprob") else None
            return web.json_response({"output_ids": ids, "meta_info": {"output_token_logprobs": logprobs}})
        finally:
            self.in_flight -= 1

    async def _health(self, request: Any) -> Any:
        from aiohttp import web

        return web.Response(status=200)

    def _serve(self) -> None:
        from aiohttp import web

        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/generate", self._generate)
        app.router.add_get("/health_generate", self._health)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        self._loop.run_until_complete(web.TCPSite(self._runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> FakeSGLang:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def server() -> Iterator[FakeSGLang]:
    with FakeSGLang() as running:
        yield running


def client(server: FakeSGLang, **settings: Any) -> HttpClient:
    return HttpClient(server.url, ServerSettings(**{**FAST, **settings}))


def test_generate_answers_come_back_in_order(server: FakeSGLang) -> None:
    payloads = [{"input_ids": [i, i + 1, i + 2], "sampling_params": {}, "return_logprob": True} for i in range(6)]
    answers = client(server).post_many("generate", payloads)
    assert [a["output_ids"] for a in answers] == [[i + 2, i + 1, i] for i in range(6)]
    assert answers[0]["meta_info"]["output_token_logprobs"][0][:2] == [-0.5, 2]
    assert client(server).healthy()


def test_5xx_answers_are_retried_with_backoff(server: FakeSGLang) -> None:
    server.fail_first = 2
    start = time.monotonic()
    answer = client(server, max_attempts=3, retry_delay=0.2).post("generate", {"input_ids": [1, 2]})
    assert answer["output_ids"] == [2, 1] and server.requests == 3
    assert time.monotonic() - start >= 0.2 + 0.4  # retry_delay × 2^attempt


def test_too_many_failures_name_max_attempts(server: FakeSGLang) -> None:
    server.fail_first = 5
    with pytest.raises(
        RLCoreError, match=r"failed 2 times \(actor_rollout_ref.rollout.server.max_attempts\).*HTTP 503"
    ):
        client(server, max_attempts=2).post("generate", {"input_ids": [1]})
    assert server.requests == 2


def test_4xx_is_not_retried(server: FakeSGLang) -> None:
    server.fail_first, server.fail_status = 5, 400
    with pytest.raises(RLCoreError, match="refused the request: HTTP 400"):
        client(server, max_attempts=3).post("generate", {"input_ids": [1]})
    assert server.requests == 1


def test_a_slow_answer_times_out_and_is_retried(server: FakeSGLang) -> None:
    server.delay = 1.0
    start = time.monotonic()
    with pytest.raises(RLCoreError, match=r"no answer within actor_rollout_ref.rollout.server.timeout=0.2 s"):
        client(server, timeout=0.2, max_attempts=2).post("generate", {"input_ids": [1]})
    assert time.monotonic() - start < 1.0 and server.requests == 2


def test_max_connections_bounds_concurrent_requests(server: FakeSGLang) -> None:
    server.delay = 0.1
    payloads = [{"input_ids": [i]} for i in range(8)]
    client(server, max_connections=2).post_many("generate", payloads)
    assert server.peak == 2
    server.peak = 0
    client(server, max_connections=8).post_many("generate", payloads)
    assert server.peak > 2


def test_a_dead_server_is_an_error_after_the_attempts() -> None:
    dead = HttpClient(f"http://127.0.0.1:{free_port()}", ServerSettings(**{**FAST, "max_attempts": 2}))
    with pytest.raises(RLCoreError, match="failed 2 times.*Connect"):
        dead.post("generate", {"input_ids": [1]})
    assert not dead.healthy()


#: a server process: healthy after ``delay`` seconds (never when ``delay`` < 0), or exits with ``code``
SERVER_SCRIPT = """
import sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
port, delay, code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
if code:
    sys.stderr.write("cannot load the model\\n"); sys.exit(code)
start = time.monotonic()
class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        ok = delay >= 0 and time.monotonic() - start >= delay
        self.send_response(200 if ok else 503); self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def start(tmp_path: Path, delay: float, code: int = 0, wait: float = 20.0) -> Callable[[], Any]:
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    port = free_port()
    settings = ServerSettings(timeout=1.0, max_start_wait_time=wait)
    return lambda: launch_server(
        [sys.executable, str(script), str(port), str(delay), str(code)], f"http://127.0.0.1:{port}", settings
    )


def test_launch_waits_until_the_server_is_healthy(tmp_path: Path) -> None:
    begun = time.monotonic()
    process = start(tmp_path, delay=1.0)()
    try:
        assert process.poll() is None and time.monotonic() - begun >= 1.0
    finally:
        stop(process)
    assert process.poll() is not None


def test_launch_reports_a_server_that_exits(tmp_path: Path) -> None:
    with pytest.raises(RLCoreError, match="exited with code 3 while starting: cannot load the model"):
        start(tmp_path, delay=0, code=3)()


def test_launch_gives_up_after_max_start_wait_time(tmp_path: Path) -> None:
    begun = time.monotonic()
    with pytest.raises(
        RLCoreError, match=r"not healthy within actor_rollout_ref.rollout.server.max_start_wait_time=1.5 s"
    ):
        start(tmp_path, delay=-1, wait=1.5)()
    assert time.monotonic() - begun < 10


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sglang_rollout_mode": "remote"}, "sglang_rollout_mode must be one of engine, server, got 'remote'"),
        ({"server": {"timeout": 0}}, "server.timeout must be a positive number, got 0"),
        ({"server": {"max_attempts": 1.5}}, "server.max_attempts must be a positive integer, got 1.5"),
        ({"server": {"retries": 2}}, "server.retries: not a server setting"),
    ],
)
def test_bad_server_settings_name_the_key(section: dict[str, Any], message: str) -> None:
    with pytest.raises(RLCoreError, match=message.replace(".", r"\.").replace("(", r"\(")):
        rollout_mode(section)
        ServerSettings.from_rollout(section)


def test_server_settings_and_command() -> None:
    settings = ServerSettings.from_rollout({"server": {"timeout": 5, "max_attempts": 4, "max_start_wait_time": 9}})
    assert settings == ServerSettings(timeout=5.0, max_attempts=4, max_start_wait_time=9.0)
    assert rollout_mode({}) == "engine" and rollout_mode({"sglang_rollout_mode": "server"}) == "server"
    command = server_command(
        {
            "model_path": "/m",
            "tp_size": 2,
            "skip_tokenizer_init": True,
            "disable_radix_cache": False,
            "x": {"a": 1},
            "cuda_graph_bs": [8, 16],
        },
        "127.0.0.1",
        8000,
    )
    assert command[1:] == [
        "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", "8000",
        "--model-path", "/m", "--tp-size", "2", "--skip-tokenizer-init", "--x", '{"a": 1}',
        "--cuda-graph-bs", "8", "16",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], None),
        (
            ["actor_rollout_ref.rollout.server.timeout=-1"],
            "actor_rollout_ref.rollout.server.timeout must be a positive",
        ),
    ],
)
def test_dry_run_checks_server_mode(
    tmp_path: Path, tiny_model_dir: Path, overrides: list[str], message: str | None
) -> None:
    """verl's server-mode keys pass the dry run; a bad value is named there, before anything starts."""
    from rlcore_testkit.runs import dry_run, make_tiny_task, tiny_overrides

    task = make_tiny_task(tmp_path / "task")
    result = dry_run(
        *tiny_overrides(tmp_path, tiny_model_dir, task),
        "actor_rollout_ref.rollout.name=sglang",
        "actor_rollout_ref.rollout.sglang_rollout_mode=server",
        "actor_rollout_ref.rollout.server.max_start_wait_time=600",
        *overrides,
    )
    if message is None:
        assert result.exit_code == 0, result.output
        assert "sglang_rollout_mode: server" in result.output
    else:
        assert result.exit_code == 2 and message in result.output, result.output
