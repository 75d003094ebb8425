"""SGLang's server mode (``actor_rollout_ref.rollout.sglang_rollout_mode=server``), verl's keys and behaviour.

Instead of an in-process ``sglang.Engine``, each generating rank starts ``python -m sglang.launch_server`` as a
child process on a free local port, waits until its ``/health_generate`` answers (at most
``rollout.server.max_start_wait_time`` seconds, failing early when the process dies) and talks to it over
HTTP. :class:`ServerEngine` has the methods of ``sglang.Engine`` that :class:`~rlcore_plugin_sglang.engine.
SGLangRolloutEngine` calls, so the rest of the engine is the same in both modes.

HTTP (:class:`HttpClient`): every request has a ``server.timeout`` (seconds) and is tried at most
``server.max_attempts`` times; timeouts, refused connections and 5xx answers are retried after
``server.retry_delay × 2^attempt`` seconds, a 4xx answer is not (the request itself is wrong). A rollout's
prompts are sent as one ``/generate`` request each, concurrently, over at most ``server.max_connections``
open connections.

This module imports neither torch nor sglang (the plugin's config hook uses it).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlcore.api import ROLLOUT_KEY, RLCoreError
from rlcore_plugin_sglang.config import SGLangRolloutConfig, SGLangServerConfig

log = logging.getLogger(__name__)

__all__ = [
    "MODES",
    "HttpClient",
    "ServerEngine",
    "ServerSettings",
    "free_port",
    "launch_server",
    "rollout_mode",
    "server_command",
]

MODE_KEY = f"{ROLLOUT_KEY}.sglang_rollout_mode"
SERVER_KEY = f"{ROLLOUT_KEY}.server"
#: ``engine``: ``sglang.Engine`` in the worker process; ``server``: an HTTP server process per rank
MODES = ("engine", "server")
#: seconds between two health checks while the server starts
POLL_S = 0.5


def rollout_mode(config: Mapping[str, Any]) -> str:
    """``rollout.sglang_rollout_mode`` (the ``actor_rollout_ref.rollout`` section), checked."""
    mode = config.get("sglang_rollout_mode", SGLangRolloutConfig.sglang_rollout_mode)
    if mode not in MODES:
        raise RLCoreError(f"{MODE_KEY} must be one of {', '.join(MODES)}, got {mode!r}")
    return str(mode)


def _positive(section: Mapping[str, Any], key: str, kind: type) -> Any:
    value = section.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or (kind is int and value != int(value))
    ):
        what = "a positive integer" if kind is int else "a positive number"
        raise RLCoreError(f"{SERVER_KEY}.{key} must be {what}, got {value!r}")
    return kind(value)


@dataclass(frozen=True)
class ServerSettings(SGLangServerConfig):
    """``rollout.server`` (verl's ``ServerConfig``): request ``timeout`` (s), ``max_attempts`` per request, base
    ``retry_delay`` (s), ``max_connections`` open at once and ``max_start_wait_time`` (s) for start-up (the
    fields and defaults of :class:`~rlcore_plugin_sglang.config.SGLangServerConfig`)."""

    @classmethod
    def from_rollout(cls, config: Mapping[str, Any]) -> ServerSettings:
        """Read ``server`` from the ``actor_rollout_ref.rollout`` section; bad values name their key."""
        section = config.get("server") or {}
        unknown = sorted(set(section) - set(cls.__dataclass_fields__))
        if unknown:
            raise RLCoreError(
                f"{SERVER_KEY}.{unknown[0]}: not a server setting ({', '.join(cls.__dataclass_fields__)})"
            )
        defaults = cls()
        values = {name: section.get(name, getattr(defaults, name)) for name in cls.__dataclass_fields__}
        return cls(
            timeout=_positive(values, "timeout", float),
            max_attempts=_positive(values, "max_attempts", int),
            retry_delay=_positive(values, "retry_delay", float),
            max_connections=_positive(values, "max_connections", int),
            max_start_wait_time=_positive(values, "max_start_wait_time", float),
        )


class HttpClient:
    """JSON over HTTP to one server, with :class:`ServerSettings`' timeout, retries and connection limit.

    Args:
        base_url: ``http://host:port``.
        settings: the ``rollout.server`` settings.
    """

    def __init__(self, base_url: str, settings: ServerSettings) -> None:
        self.base_url = base_url.rstrip("/")
        self.settings = settings

    async def _request(self, session: Any, method: str, endpoint: str, payload: Any) -> Any:
        import aiohttp

        url = f"{self.base_url}/{endpoint.lstrip('/')}"
        last = ""
        for attempt in range(self.settings.max_attempts):
            try:
                async with session.request(method, url, json=payload) as response:
                    if response.status >= 500:
                        last = f"HTTP {response.status}: {(await response.text())[:200]}"
                    elif response.status >= 400:
                        raise RLCoreError(
                            f"SGLang server {url} refused the request: HTTP {response.status}: "
                            f"{(await response.text())[:200]}"
                        )
                    else:
                        return await response.json(content_type=None) if response.content_length != 0 else {}
            except TimeoutError:
                last = f"no answer within {SERVER_KEY}.timeout={self.settings.timeout} s"
            except aiohttp.ClientConnectionError as exc:
                last = f"{type(exc).__name__}: {exc}"
            log.warning("SGLang server %s: attempt %d failed: %s", url, attempt + 1, last)
            if attempt + 1 < self.settings.max_attempts:
                await asyncio.sleep(self.settings.retry_delay * 2**attempt)
        raise RLCoreError(
            f"SGLang server {url} failed {self.settings.max_attempts} times ({SERVER_KEY}.max_attempts); last: {last}"
        )

    def _session(self) -> Any:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=self.settings.max_connections)
        return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self.settings.timeout))

    async def _many(self, method: str, endpoint: str, payloads: Sequence[Any]) -> list[Any]:
        async with self._session() as session:
            return list(await asyncio.gather(*(self._request(session, method, endpoint, p) for p in payloads)))

    def post_many(self, endpoint: str, payloads: Sequence[Any]) -> list[Any]:
        """POST each payload to ``endpoint`` concurrently; the answers in order."""
        return asyncio.run(self._many("POST", endpoint, payloads))

    def post(self, endpoint: str, payload: Any = None) -> Any:
        """POST one payload (``{}`` when None) to ``endpoint``; its answer."""
        return self.post_many(endpoint, [payload or {}])[0]

    def healthy(self) -> bool:
        """Whether ``GET /health_generate`` answers 200 within ``timeout`` (one try, no retries)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.base_url}/health_generate", timeout=self.settings.timeout) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, OSError):
            return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def server_command(kwargs: Mapping[str, Any], host: str, port: int) -> list[str]:
    """``python -m sglang.launch_server`` with ``kwargs`` (``sglang.Engine``'s keyword names) as flags:
    ``tp_size=2`` → ``--tp-size 2``, ``True`` → the bare flag, ``False``/None → left out, a list as its values
    (``cuda_graph_bs=[8, 16]`` → ``--cuda-graph-bs 8 16``, SGLang's many-valued flags), a dict as JSON."""
    import json

    command = [sys.executable, "-m", "sglang.launch_server", "--host", host, "--port", str(port)]
    for name, value in kwargs.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            command += [flag, *map(str, value)]
        else:
            command += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return command


def launch_server(command: Sequence[str], base_url: str, settings: ServerSettings) -> subprocess.Popen[bytes]:
    """Start ``command`` and wait until ``base_url`` is healthy. The process is stopped and an error names
    the key when it exits first or is not healthy within ``max_start_wait_time``."""
    process = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = HttpClient(base_url, settings)
    deadline = time.monotonic() + settings.max_start_wait_time
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace")[-2000:] if process.stderr else ""
            raise RLCoreError(
                f"{MODE_KEY}=server: the SGLang server exited with code {process.returncode} while starting: {err}"
            )
        if client.healthy():
            return process
        time.sleep(POLL_S)
    stop(process)
    raise RLCoreError(
        f"{MODE_KEY}=server: the SGLang server at {base_url} was not healthy within "
        f"{SERVER_KEY}.max_start_wait_time={settings.max_start_wait_time} s; raise it or check the server's log"
    )


def stop(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """Terminate ``process`` (kill it after ``grace_s``)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class ServerEngine:
    """The ``sglang.Engine`` methods :class:`~rlcore_plugin_sglang.engine.SGLangRolloutEngine` uses, served by
    an SGLang HTTP server process.

    Args:
        kwargs: ``sglang.Engine``'s keyword arguments (become the server's flags).
        settings: ``rollout.server``.
        host: the interface the server listens on.
    """

    def __init__(self, kwargs: Mapping[str, Any], settings: ServerSettings, host: str = "127.0.0.1") -> None:
        port = free_port(host)
        self.tp_size = int(kwargs.get("tp_size", 1))
        self.base_url = f"http://{host}:{port}"
        self.client = HttpClient(self.base_url, settings)
        self.process = launch_server(server_command(kwargs, host, port), self.base_url, settings)

    def generate(
        self,
        input_ids: Sequence[Sequence[int]],
        sampling_params: Sequence[Mapping[str, Any]],
        return_logprob: bool = False,
        logprob_start_len: int | None = None,
    ) -> list[dict[str, Any]]:
        """One ``/generate`` request per prompt, concurrently; SGLang's answers in order."""
        payloads = []
        for ids, params in zip(input_ids, sampling_params):
            payload: dict[str, Any] = {"input_ids": list(ids), "sampling_params": dict(params)}
            if return_logprob:
                payload["return_logprob"] = True
                if logprob_start_len is not None:
                    payload["logprob_start_len"] = logprob_start_len
            payloads.append(payload)
        return self.client.post_many("generate", payloads)

    def update_weights_from_tensor(self, named_tensors: list[tuple[str, Any]], flush_cache: bool) -> None:
        """Send the tensors as SGLang's serialized handles (``MultiprocessingSerializer``; CUDA tensors are
        shared, not copied), one copy per tensor-parallel rank, to ``/update_weights_from_tensor``."""
        from sglang.srt.utils import MultiprocessingSerializer

        serialized = base64.b64encode(MultiprocessingSerializer.serialize(named_tensors)).decode()
        payload = {
            "serialized_named_tensors": [serialized] * self.tp_size,
            "load_format": None,
            "flush_cache": flush_cache,
        }
        answer = self.client.post("update_weights_from_tensor", payload)
        if isinstance(answer, Mapping) and answer.get("success") is False:
            raise RLCoreError(f"the SGLang server rejected the weights: {answer.get('message')}")

    def release_memory_occupation(self) -> None:
        """``/release_memory_occupation``: free weights and KV cache."""
        self.client.post("release_memory_occupation")

    def resume_memory_occupation(self) -> None:
        """``/resume_memory_occupation``: take the memory back."""
        self.client.post("resume_memory_occupation")

    def shutdown(self) -> None:
        """Stop the server process."""
        stop(self.process)
