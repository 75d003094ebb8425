"""A remote Sandbox Fusion service as the code scorer's backend (``reward_model.sandbox_fusion.url``).

Each test is one ``POST`` of Sandbox Fusion's ``run_code`` request to the URL as given (verl's convention: the
URL names the endpoint): ``code``, ``language="python"``, ``stdin``, ``run_timeout`` and ``compile_timeout``
(the problem's time limit; the service measures wall time), ``memory_limit_MB`` (the problem's
``memory_limit``, else ``reward_model.sandbox_fusion.memory_limit_mb``). The reply's ``status``
(``Success``/``Failed``/``SandboxError``) and ``run_result`` (``status`` ``Finished``/``Error``/
``TimeLimitExceeded``, ``return_code``, ``stdout``, ``stderr``) become a :class:`SandboxResult` with the local
sandbox's statuses (:func:`result_of`), so the scorer judges both backends alike.

Bounds: at most ``max_concurrent`` requests are in flight at once from this host for one URL, across every
scorer process (:func:`request_slot`: one of ``max_concurrent`` lock files, released by the kernel when the
holder ends, even when a scorer process is killed). A connection error, a timeout (the run time plus
:data:`API_SLACK_S`), an HTTP 429 or 5xx, a reply that is not JSON and a ``SandboxError`` reply are tried again,
:data:`ATTEMPTS` times in all, :data:`RETRY_DELAY_S` times the attempt number apart; then (or at once on
another HTTP error, such as a 404 for a wrong path) :class:`FusionUnavailable` says why, and the scorer scores
the sample 0 with that reason.

A run hands its settings to its scorer processes in the environment (:func:`export_settings`, as the local
sandbox's ``allow_unconfined``); :func:`settings_from_env` reads them back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcore_plugin_sandbox.config import SandboxFusionConfig
from rlcore_plugin_sandbox.launch import check_stdin
from rlcore_plugin_sandbox.limits import SandboxLimits, SandboxResult, Status

#: the environment variables that carry ``reward_model.sandbox_fusion`` to the scorer processes
URL_ENV = "RLCORE_SANDBOX_FUSION_URL"
CONCURRENT_ENV = "RLCORE_SANDBOX_FUSION_MAX_CONCURRENT"
MEMORY_ENV = "RLCORE_SANDBOX_FUSION_MEMORY_LIMIT_MB"
#: tries of one request in all (the first and the retries)
ATTEMPTS = 3
#: seconds before retry n (times n)
RETRY_DELAY_S = 0.5
#: seconds a request may take beyond the program's own time limit
API_SLACK_S = 10.0
#: seconds between looks for a free request slot
_SLOT_POLL_S = 0.01


class FusionUnavailable(Exception):
    """The Sandbox Fusion service did not answer a request usably; the message says why, ``retry`` whether
    another attempt may fare better."""

    def __init__(self, message: str, retry: bool = False) -> None:
        """``message``: why; ``retry``: whether the failure is worth another attempt."""
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class FusionSettings:
    """Where and how the code scorer sends programs: ``reward_model.sandbox_fusion``'s values."""

    url: str
    max_concurrent: int = 64
    memory_limit_mb: int = 1024


def export_settings(section: SandboxFusionConfig) -> None:
    """Pass ``reward_model.sandbox_fusion`` on to the processes the run starts (scorer processes, Ray workers);
    with no URL, clear what an earlier run in this process set."""
    if not section.url:
        for name in (URL_ENV, CONCURRENT_ENV, MEMORY_ENV):
            os.environ.pop(name, None)
        return
    os.environ[URL_ENV] = str(section.url)
    os.environ[CONCURRENT_ENV] = str(section.max_concurrent)
    os.environ[MEMORY_ENV] = str(section.memory_limit_mb)


def settings_from_env() -> FusionSettings | None:
    """The settings :func:`export_settings` passed on, or None (code runs in the local sandbox)."""
    url = os.environ.get(URL_ENV)
    if not url:
        return None
    return FusionSettings(
        url=url,
        max_concurrent=int(os.environ.get(CONCURRENT_ENV) or FusionSettings.max_concurrent),
        memory_limit_mb=int(os.environ.get(MEMORY_ENV) or FusionSettings.memory_limit_mb),
    )


@contextlib.contextmanager
def request_slot(url: str, max_concurrent: int) -> Iterator[int]:
    """Hold one of ``max_concurrent`` request slots of ``url`` on this host (waiting for one to free up);
    yields the slot's number."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"rlcore-sandbox-fusion-{os.getuid()}-{digest}"
    folder.mkdir(mode=0o700, exist_ok=True)
    while True:
        for slot in range(max_concurrent):
            fd = os.open(folder / f"slot-{slot}", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield slot
            finally:
                os.close(fd)  # releases the lock
            return
        time.sleep(_SLOT_POLL_S)


def _post(url: str, payload: bytes, timeout: float) -> dict[str, Any]:
    """The reply to one request; raises :class:`FusionUnavailable` when there is no usable one."""
    request = urllib.request.Request(
        url, data=payload, headers={"Content-Type": "application/json", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) checked by the config
            body = response.read()
    except urllib.error.HTTPError as exc:
        raise FusionUnavailable(
            f"HTTP {exc.code} {exc.reason} from {url}", retry=exc.code == 429 or exc.code >= 500
        ) from None
    except (urllib.error.URLError, OSError) as exc:  # refused, unreachable, timed out
        reason = getattr(exc, "reason", exc)
        raise FusionUnavailable(f"no answer from {url}: {reason}", retry=True) from None
    try:
        reply = json.loads(body)
    except ValueError:
        raise FusionUnavailable(f"{url} answered with something that is not JSON: {body[:120]!r}", retry=True) from None
    if not isinstance(reply, dict) or reply.get("status") == "SandboxError":
        message = reply.get("message") if isinstance(reply, dict) else reply
        raise FusionUnavailable(f"{url} answered SandboxError: {str(message)[:200]}", retry=True)
    return reply


def run_code(settings: FusionSettings, code: str, stdin: str, limits: SandboxLimits) -> dict[str, Any]:
    """Sandbox Fusion's reply to running the Python program ``code`` on ``stdin`` within ``limits``
    (``cpu_seconds`` as its run and compile timeout, ``memory_mb`` as its memory limit), holding a request
    slot; raises :class:`FusionUnavailable` when every attempt failed."""
    timeout = max(1, round(limits.cpu_seconds))
    payload = json.dumps(
        {
            "code": code,
            "language": "python",
            "stdin": stdin,
            "compile_timeout": timeout,
            "run_timeout": timeout,
            "memory_limit_MB": limits.memory_mb,
            "files": {},
            "fetch_files": [],
        }
    ).encode()
    last: FusionUnavailable | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(RETRY_DELAY_S * attempt)
        try:
            with request_slot(settings.url, settings.max_concurrent):
                return _post(settings.url, payload, 2 * timeout + API_SLACK_S)
        except FusionUnavailable as exc:
            last = exc
            if not exc.retry:
                break
    tries = f"after {attempt + 1} attempt{'s' if attempt else ''}"
    raise FusionUnavailable(f"Sandbox Fusion {tries}: {last}")


def _status(reply: dict[str, Any], run: dict[str, Any]) -> Status:
    """The local sandbox's status for a Sandbox Fusion reply (``run``: its ``run_result``, or empty)."""
    if run.get("status") == "TimeLimitExceeded":
        return "timeout"
    if reply.get("status") == "Success" and run.get("status") == "Finished" and run.get("return_code") == 0:
        return "ok"
    if "MemoryError" in str(run.get("stderr") or ""):
        return "memory"
    return "error"


def result_of(reply: dict[str, Any], output_bytes: int) -> SandboxResult:
    """A Sandbox Fusion reply as a :class:`SandboxResult`: stdout and stderr cut at ``output_bytes`` each (the
    cut streams named in ``truncated_streams``), a failed compile's stderr in ``stderr``."""
    run = reply.get("run_result") or {}
    compiled = reply.get("compile_result") or {}
    streams = {"stdout": str(run.get("stdout") or ""), "stderr": str(run.get("stderr") or compiled.get("stderr") or "")}
    cut = tuple(name for name, text in streams.items() if len(text.encode()) > output_bytes)
    kept = {name: text.encode()[:output_bytes].decode(errors="ignore") for name, text in streams.items()}
    return SandboxResult(
        status=_status(reply, run),
        stdout=kept["stdout"],
        stderr=kept["stderr"],
        exit_code=run.get("return_code"),
        wall_seconds=float(run.get("execution_time") or 0.0),
        truncated=bool(cut),
        truncated_streams=cut,
        isolation="sandbox-fusion",
    )


def run_python_remote(settings: FusionSettings, code: str, stdin: str, limits: SandboxLimits) -> SandboxResult:
    """:func:`rlcore_plugin_sandbox.run_python`'s counterpart on the Sandbox Fusion service of ``settings``:
    ``stdin`` without a UTF-8 form is the same ``ValueError``, a service that fails is :class:`FusionUnavailable`."""
    check_stdin(stdin)
    return result_of(run_code(settings, code, stdin, limits), limits.output_bytes)


def probe(section: SandboxFusionConfig) -> str | None:
    """Why the service of ``section`` cannot run code rewards (it does not run ``print(1)`` correctly), or None."""
    settings = FusionSettings(str(section.url), section.max_concurrent, section.memory_limit_mb)
    try:
        result = run_python_remote(settings, "print(1)", "", SandboxLimits(memory_mb=section.memory_limit_mb))
    except FusionUnavailable as exc:
        return f"the service does not answer: {exc}"
    if result.status != "ok" or result.stdout.strip() != "1":
        return (
            f"the service ran print(1) with status {result.status!r} and output {result.stdout[:80]!r} "
            f"(stderr {result.stderr[:200]!r}); is this Sandbox Fusion's run_code endpoint?"
        )
    return None
