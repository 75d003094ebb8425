"""Check the model and tokenizer paths of a run before anything loads: one line naming the path and the fix."""

from __future__ import annotations

import errno
import functools
import json
import os
import re
import socket
import struct
import urllib.error
import urllib.request
from pathlib import Path

from omegaconf import DictConfig

from rlcore.errors import RLCoreError

#: what a Hugging Face repo id looks like (``Qwen/Qwen3-1.7B``, ``gpt2``)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.safetensors.index.json", "*.bin.index.json")
#: the Hugging Face hub, unless ``HF_ENDPOINT`` names another (as for ``huggingface_hub``)
HUB = "https://huggingface.co"
#: how long :func:`hub_unreachable` waits for the hub to answer
HUB_PROBE_TIMEOUT_S = 5.0


class ModelPathError(RLCoreError):
    """A model or tokenizer path that cannot be loaded; the message names the key, the path and the fix."""


def _check_safetensors(path: Path, key: str) -> None:
    """The header of a ``.safetensors`` file parses and its size matches the tensors it lists."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ModelPathError(f"{key}: weights file {path} is truncated ({size} bytes); download it again")
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            raise ModelPathError(
                f"{key}: weights file {path} is truncated or not a safetensors file; download it again"
            )
        try:
            header = json.loads(handle.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelPathError(f"{key}: weights file {path} has a corrupt header ({exc}); download it again") from exc
    ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        raise ModelPathError(
            f"{key}: weights file {path} has {size} bytes but its header lists {expected}; "
            "it is truncated or damaged: download it again"
        )


def _check_folder(folder: Path, key: str, *, weights: bool, tokenizer: bool) -> None:
    """A local model folder: a parseable ``config.json`` with a model type, weights that are intact, tokenizer files."""
    if not folder.is_dir():
        raise ModelPathError(
            f"{key}={folder} is a file, not a model folder; point it at the folder holding config.json"
        )
    config = folder / "config.json"
    if weights or not any((folder / name).is_file() for name in TOKENIZER_FILES):
        if not config.is_file():
            raise ModelPathError(
                f"{key}={folder} is not a model folder: it has no config.json (a Hugging Face model "
                "folder, e.g. from huggingface-cli download, has one)"
            )
        try:
            parsed = json.loads(config.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelPathError(
                f"{key}: {config} is not valid JSON ({exc}); restore or download the model again"
            ) from exc
        if not isinstance(parsed, dict) or "model_type" not in parsed:
            raise ModelPathError(f"{key}: {config} has no model_type; it is not a Hugging Face model config")
    if weights:
        found = [p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern)]
        if not found:
            raise ModelPathError(f"{key}={folder} has no weights (*.safetensors or *.bin); download the model again")
        for path in found:
            if path.name.endswith(".safetensors"):
                _check_safetensors(path, key)
    if tokenizer and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ModelPathError(
            f"{key}={folder} has no tokenizer ({', '.join(TOKENIZER_FILES)}); set "
            "actor_rollout_ref.model.tokenizer_path to a folder that has one"
        )


def _check_path(value: str, key: str, *, weights: bool, tokenizer: bool) -> None:
    path = Path(os.path.expanduser(value))
    if path.exists():
        _check_folder(path, key, weights=weights, tokenizer=tokenizer)
        return
    local_looking = value.startswith(("/", "./", "../", "~")) or not _REPO_ID.match(value)
    if local_looking:
        raise ModelPathError(f"{key}={value}: no such folder; give a local model folder or a Hugging Face repo id")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(value, "config.json"), str):
        return
    if os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True", "YES", "yes"):
        raise ModelPathError(
            f"{key}={value}: not a local folder, and the Hugging Face repo {value} is not in the "
            "cache while HF_HUB_OFFLINE is set; download it first or give a local folder"
        )
    endpoint = os.environ.get("HF_ENDPOINT") or HUB
    unreachable = hub_unreachable(endpoint)
    if unreachable:
        raise ModelPathError(
            f"{key}={value}: not a local folder and not in the Hugging Face cache, and the hub cannot be reached "
            f"({endpoint}: {unreachable}); no network? Download it where there is one (hf download {value} "
            f"--local-dir DIR) and give the folder ({key}=DIR), or set HF_HUB_OFFLINE=1 to use only the cache"
        )


@functools.cache
def hub_unreachable(endpoint: str) -> str | None:
    """Why the Hugging Face hub at ``endpoint`` cannot be reached (no name resolution, connection refused, no
    answer within :data:`HUB_PROBE_TIMEOUT_S`), or None when it answers (any HTTP status) or fails in another
    way (TLS, a proxy's error), which the download then reports. One request, through the proxies of the
    environment, asked once per process."""
    request = urllib.request.Request(endpoint.rstrip("/") + "/api/models", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=HUB_PROBE_TIMEOUT_S):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, TimeoutError):
            return f"no answer within {HUB_PROBE_TIMEOUT_S:g} s"
        if isinstance(reason, (socket.gaierror, ConnectionRefusedError)) or (
            isinstance(reason, OSError) and reason.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        ):
            return getattr(reason, "strerror", None) or str(reason)
        return None


def check_model_paths(config: DictConfig) -> None:
    """Check ``actor_rollout_ref.model.path`` (and ``tokenizer_path``, and the critic's model when a critic
    may run) before anything loads. Local folders must hold a valid ``config.json``, intact weights and a
    tokenizer; a path that looks local but does not exist is an error; a repo id not in the Hugging Face
    cache is an error when ``HF_HUB_OFFLINE`` is set or the hub cannot be reached (:func:`hub_unreachable`:
    at once, instead of the download's minute of retries), and is otherwise left to the download."""
    model = config.actor_rollout_ref.model
    if not model.path:
        return
    _check_path(str(model.path), "actor_rollout_ref.model.path", weights=True, tokenizer=not model.tokenizer_path)
    if model.tokenizer_path:
        _check_path(str(model.tokenizer_path), "actor_rollout_ref.model.tokenizer_path", weights=False, tokenizer=True)
    critic_path = config.critic.model.get("path")
    if config.critic.enable and critic_path and critic_path != model.path:
        _check_path(str(critic_path), "critic.model.path", weights=True, tokenizer=False)
