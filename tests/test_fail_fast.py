"""Mistakes are reported at once: a config error that needs no plugin before torch loads, and a hub model
name on a machine that cannot reach the hub before the download's minute of retries."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlcore.model_check import ModelPathError, check_model_paths, hub_unreachable

#: each command line below goes through rlcore's CLI in one process; what torch and friends it imported
CLI_SCRIPT = """
import sys
from rlcore.cli import main
for args in {commands!r}:
    sys.argv = ['rlcore', *args]
    try:
        main()
    except SystemExit as exc:
        print('EXIT', exc.code, flush=True)
heavy = sorted(m for m in ('torch', 'transformers', 'ray', 'rlcore_plugin_fsdp.engine') if m in sys.modules)
print('HEAVY=' + ','.join(heavy))
"""


def run_cli(tmp_path: Path, *commands: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the ``rlcore`` command lines in one fresh process in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLCORE_")}
    env["RLCORE_CACHE"] = str(tmp_path / "cache")
    return subprocess.run(
        [sys.executable, "-c", CLI_SCRIPT.format(commands=[list(c) for c in commands])],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_config_errors_are_reported_before_torch_loads(tmp_path: Path) -> None:
    """An unknown key, a wrong type, an unknown component and a value out of range, with and without
    ``--dry-run``: each one line naming the key, exit status 2, and neither torch nor a training backend
    imported."""
    result = run_cli(
        tmp_path,
        ["run", "foo.bar=1"],
        ["run", "--dry-run", "trainer.total_epochs=x"],
        ["run", "algorithm.adv_estimator=nope", "data.train_batch_sise=8"],
        ["run", "actor_rollout_ref.actor.optim.lr=-1"],
    )
    assert result.stdout.count("EXIT 2") == 4, result.stdout + result.stderr
    assert "unknown config key 'foo.bar'" in result.stderr
    assert "trainer.total_epochs='x' has the wrong type" in result.stderr
    assert "unknown advantage_estimator 'nope'" in result.stderr and "data.train_batch_sise" in result.stderr
    assert "actor_rollout_ref.actor.optim.lr must be a number >= 0, got -1" in result.stderr
    assert result.stdout.strip().endswith("HEAVY="), result.stdout
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "cache").exists(), "nothing was started"


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def hub_config(path: str) -> object:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": path, "tokenizer_path": None}},
            "critic": {"enable": False, "model": {}},
        }
    )


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://127.0.0.1:{closed_port}", "Connection refused"),
        ("https://hub.example.invalid", "Name or service not known"),  # .invalid never resolves (RFC 2606)
    ],
)
def test_a_hub_name_without_network_fails_at_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str, reason: str
) -> None:
    """``HF_HUB_OFFLINE`` unset, a repo id that is not in the cache and a hub that cannot be reached: one
    error naming the key, the network, ``HF_HUB_OFFLINE`` and the local-folder alternative, in well under the
    download's retries."""
    endpoint = endpoint.format(closed_port=closed_port())
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    hub_unreachable.cache_clear()
    start = time.monotonic()
    with pytest.raises(ModelPathError) as info:
        check_model_paths(hub_config("someone/some-model"))
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert message.startswith("actor_rollout_ref.model.path=someone/some-model: not a local folder")
    assert f"the hub cannot be reached ({endpoint}: " in message and "no network?" in message
    assert reason.split()[-1].lower() in message.lower()
    assert "HF_HUB_OFFLINE=1" in message and "actor_rollout_ref.model.path=DIR" in message


def test_a_hub_that_answers_leaves_the_name_to_the_download(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Any HTTP answer (here a 404 from a local server) means the network is there: no error before the
    download."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
        hub_unreachable.cache_clear()
        check_model_paths(hub_config("someone/some-model"))
    finally:
        server.shutdown()
        server.server_close()
